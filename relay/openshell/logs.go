package openshell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

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
// name, oldest first: GetSandbox for its id, then GetSandboxLogs with the
// gateway's defaults (its newest 2000 records, every source and level).
// The sandbox need not be READY. What the records hold is the gateway's
// choice; ferry's embedded gateway logs each exec's argv, workdir,
// environment keys, exit code and byte counts, never stdin or environment
// values.
func (c *Client) SandboxLogs(ctx context.Context, name string) ([]LogLine, error) {
	sb, err := c.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	resp, err := c.api.GetSandboxLogs(ctx, &openshellv1.GetSandboxLogsRequest{
		SandboxId: sb.ID,
		Workspace: c.cfg.Workspace,
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
	sb, err := c.Get(ctx, name)
	if err != nil {
		return err
	}
	req := &openshellv1.WatchSandboxRequest{Id: sb.ID, FollowLogs: true, LogTailLines: followTail}
	if !since.IsZero() {
		req.LogSinceMs = since.UnixMilli()
	}
	stream, err := c.api.WatchSandbox(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return c.lifecycleError("follow the log of sandbox "+name, err)
	}
	for {
		ev, err := stream.Recv()
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("follow the log of sandbox %s: the gateway ended the stream", name)
		}
		if err != nil {
			return c.lifecycleError("follow the log of sandbox "+name, err)
		}
		switch p := ev.GetPayload().(type) {
		case *openshellv1.SandboxStreamEvent_Log:
			fn(logLine(p.Log))
		case *openshellv1.SandboxStreamEvent_Warning:
			if warn != nil {
				warn(p.Warning.GetMessage())
			}
		}
	}
}

func logLine(l *openshellv1.SandboxLogLine) LogLine {
	return LogLine{Time: time.UnixMilli(l.GetTimestampMs()), Level: l.GetLevel(), Source: l.GetSource(), Target: l.GetTarget(), Message: l.GetMessage(), Fields: l.GetFields()}
}
