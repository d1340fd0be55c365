package agent

import (
	"context"
	"io/fs"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

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
		if !ok || info.GetDomain() != wire.ErrorDomain {
			continue
		}
		e.Entry = info.GetMetadata()["entry"]
		e.chunk = info.GetMetadata()[wire.ChunkIndex]
		for _, r := range wire.Reasons {
			if r.Reason == info.GetReason() {
				e.kind = r.Err
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
