package openshell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
)

// LogLine is one of the gateway's log records for a sandbox.
type LogLine struct {
	Time    time.Time
	Level   string // "INFO", "WARN", ...; may be empty
	Source  string // "gateway", "sandbox", ...; empty is upstream's "gateway"
	Target  string // the emitter: "ocsf" for upstream's OCSF events
	Message string
	Fields  map[string]string
}

// SandboxLogs returns the gateway's log records for the sandbox called
// name, oldest first: GetSandboxLogs with the gateway's defaults (its
// newest 2000 records, every source and level), for the id an exec
// through c resolved already, or after a GetSandbox for it. The sandbox
// need not be READY. What the records hold is the gateway's choice;
// ferry's embedded gateway logs each exec's argv, workdir, environment
// keys, exit code and byte counts, never stdin or environment values.
func (c *Client) SandboxLogs(ctx context.Context, name string) ([]LogLine, error) {
	var resp *openshellv1.GetSandboxLogsResponse
	err := c.withLogID(ctx, name, func(id string) (err error) {
		resp, err = c.api.GetSandboxLogs(ctx, &openshellv1.GetSandboxLogsRequest{
			SandboxId: id,
			Workspace: c.cfg.Workspace,
		})
		return err
	})
	if err != nil {
		return nil, c.lifecycleError("get logs of sandbox "+name, err)
	}
	out := make([]LogLine, 0, len(resp.GetLogs()))
	for _, l := range resp.GetLogs() {
		out = append(out, logLine(l))
	}
	return out, nil
}

// withLogID calls fn with the id of the sandbox called name (logID), and
// again with a fresh one when a cached id is NotFound: the sandbox was
// recreated under its name since. A failed lookup is returned as it is,
// already in lifecycleError's terms, which fn's caller must not wrap
// again: errLookup marks it.
func (c *Client) withLogID(ctx context.Context, name string, fn func(id string) error) error {
	id, cached, err := c.logID(ctx, name)
	if err != nil {
		return lookupError{err}
	}
	err = fn(id)
	if cached && status.Code(err) == codes.NotFound {
		c.forget(name)
		if id, _, err = c.logID(ctx, name); err != nil {
			return lookupError{err}
		}
		err = fn(id)
	}
	return err
}

// lookupError is a failed lookup inside withLogID, which lifecycleError
// passes through.
type lookupError struct{ err error }

func (e lookupError) Error() string { return e.err.Error() }
func (e lookupError) Unwrap() error { return e.err }

// followTail is how many records before the follow's start FollowLogs
// asks the gateway to replay: its whole tail (upstream keeps 2000), cut
// by since.
const followTail = 2000

// FollowLogs calls fn with the sandbox's log records stamped since or
// later, as the gateway streams them (WatchSandbox with follow_logs: the
// tail since since, then each new record as it comes), until ctx ends
// (nil) or the stream does (its error). warn, when set, gets each
// warning the gateway sends in the stream (upstream's "lagged" notice
// says records were dropped).
func (c *Client) FollowLogs(ctx context.Context, name string, since time.Time, fn func(LogLine), warn func(string)) error {
	var stream openshellv1.OpenShell_WatchSandboxClient
	var first *openshellv1.SandboxStreamEvent
	// The first event is read inside withLogID: a stale cached id is
	// refused there, not when the stream opens.
	err := c.withLogID(ctx, name, func(id string) (err error) {
		req := &openshellv1.WatchSandboxRequest{Id: id, FollowLogs: true, LogTailLines: followTail}
		if !since.IsZero() {
			req.LogSinceMs = since.UnixMilli()
		}
		if stream, err = c.api.WatchSandbox(ctx, req); err != nil {
			return err
		}
		first, err = stream.Recv()
		return err
	})
	for {
		if ctx.Err() != nil {
			return nil
		}
		if _, ok := ctx.Deadline(); ok && status.Code(err) == codes.DeadlineExceeded {
			// The deadline went to the gateway with the call, and its
			// clock may end the stream a moment before ctx's timer fires.
			return nil
		}
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("follow the log of sandbox %s: the gateway ended the stream", name)
		}
		if err != nil {
			return c.lifecycleError("follow the log of sandbox "+name, err)
		}
		switch p := first.GetPayload().(type) {
		case *openshellv1.SandboxStreamEvent_Log:
			fn(logLine(p.Log))
		case *openshellv1.SandboxStreamEvent_Warning:
			if warn != nil {
				warn(p.Warning.GetMessage())
			}
		}
		first, err = stream.Recv()
	}
}

func logLine(l *openshellv1.SandboxLogLine) LogLine {
	return LogLine{Time: time.UnixMilli(l.GetTimestampMs()), Level: l.GetLevel(), Source: l.GetSource(), Target: l.GetTarget(), Message: l.GetMessage(), Fields: l.GetFields()}
}
