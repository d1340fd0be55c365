package agent

import (
	"context"
	"errors"
	"io/fs"
	"syscall"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// errorDomain is the ErrorInfo domain of the agent's failures.
const errorDomain = "ferry.agent.v1"

// reasons maps the sentinels an agent-side failure can match to the
// ErrorInfo reason that carries it to the host, most specific first.
var reasons = []struct {
	err    error
	reason string
	code   codes.Code
}{
	{context.Canceled, "CANCELED", codes.Canceled},
	{context.DeadlineExceeded, "DEADLINE_EXCEEDED", codes.DeadlineExceeded},
	{archive.ErrLinkEscape, "LINK_ESCAPE", codes.InvalidArgument},
	{archive.ErrUnsafePath, "UNSAFE_PATH", codes.InvalidArgument},
	{archive.ErrUnsupported, "UNSUPPORTED", codes.InvalidArgument},
	{ErrInvalidPath, "INVALID_PATH", codes.InvalidArgument},
	{archive.ErrLimit, "LIMIT", codes.ResourceExhausted},
	{archive.ErrTruncated, "TRUNCATED", codes.DataLoss},
	{archive.ErrShort, "SHORT", codes.DataLoss},
	{ErrChunk, "CHUNK", codes.DataLoss},
	{archive.ErrDigest, "DIGEST", codes.DataLoss},
	{syscall.ENOTDIR, "NOT_DIR", codes.FailedPrecondition},
	{fs.ErrNotExist, "NOT_EXIST", codes.NotFound},
	{fs.ErrExist, "EXIST", codes.AlreadyExists},
	{fs.ErrPermission, "PERMISSION", codes.PermissionDenied},
}

// toStatus turns an agent-side failure into the gRPC status the host
// gets: a code for the kind of failure, err's message (which names the
// path or entry at fault) and an ErrorInfo whose reason names the
// sentinel err matches and whose metadata carries the entry, if an
// *archive.EntryError names one. A status passes through unchanged.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	info := &errdetails.ErrorInfo{Domain: errorDomain}
	code := codes.Unknown
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			info.Reason, code = r.reason, r.code
			break
		}
	}
	if ee := (*archive.EntryError)(nil); errors.As(err, &ee) && ee.Entry != "" {
		info.Metadata = map[string]string{"entry": ee.Entry}
	}
	if meta := chunkMeta(err); meta != nil {
		info.Metadata = meta
	}
	st := status.New(code, err.Error())
	if info.Reason == "" && info.Metadata == nil {
		return st.Err()
	}
	if withInfo, derr := st.WithDetails(info); derr == nil {
		st = withInfo
	}
	return st.Err()
}

// RemoteError is a failed call: a failure the agent reported (then Msg is
// its own message, which names the path or archive entry at fault), or
// one of gRPC's own on the way. errors.Is matches the sentinel the agent's
// failure matched: archive.ErrUnsafePath, ErrLinkEscape, ErrLimit,
// ErrTruncated, ErrUnsupported, ErrShort or ErrDigest, ErrInvalidPath,
// fs.ErrNotExist, fs.ErrExist, fs.ErrPermission or syscall.ENOTDIR; and
// context.Canceled or DeadlineExceeded for a call that ended so.
//
// The agent may be hostile: its code, message and entry are what it
// claims, for reporting; Error clips the message.
type RemoteError struct {
	Code codes.Code
	Msg  string
	// Entry is the archive entry at fault, when the agent named one.
	Entry string
	kind  error
	chunk string // a Restore chunk's position, when the agent refused one
}

func (e *RemoteError) Error() string {
	msg := e.Msg
	if msg == "" {
		msg = e.Code.String()
	}
	const max = 1024
	if len(msg) > max {
		msg = msg[:max] + "..."
	}
	return "agent: " + msg
}

// Unwrap returns the sentinel, if any.
func (e *RemoteError) Unwrap() error { return e.kind }

// fromStatus rebuilds the host-side error of a status; other errors pass
// through.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &RemoteError{Code: st.Code(), Msg: st.Message()}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != errorDomain {
			continue
		}
		e.Entry = info.GetMetadata()["entry"]
		e.chunk = info.GetMetadata()[chunkIndex]
		for _, r := range reasons {
			if r.reason == info.GetReason() {
				e.kind = r.err
			}
		}
	}
	if e.kind == nil {
		switch st.Code() {
		case codes.Canceled:
			e.kind = context.Canceled
		case codes.DeadlineExceeded:
			e.kind = context.DeadlineExceeded
		case codes.NotFound:
			e.kind = fs.ErrNotExist
		case codes.AlreadyExists:
			e.kind = fs.ErrExist
		case codes.PermissionDenied:
			e.kind = fs.ErrPermission
		}
	}
	return e
}

// callErr is the error of a failed call for op, status rebuilt.
func (c *Client) callErr(op string, err error) error {
	return c.wrap(op, fromStatus(err))
}
