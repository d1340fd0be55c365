package wire

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

// ErrorDomain is the ErrorInfo domain of the agent's failures.
const ErrorDomain = "ferry.agent.v1"

// Reasons maps the sentinels an agent-side failure can match to the
// ErrorInfo reason that carries it to the host, most specific first.
var Reasons = []struct {
	Err    error
	Reason string
	Code   codes.Code
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

// ToStatus turns an agent-side failure into the gRPC status the host
// gets: a code for the kind of failure, err's message (which names the
// path or entry at fault) and an ErrorInfo whose reason names the
// sentinel err matches and whose metadata carries the entry, if an
// *archive.EntryError names one. A status passes through unchanged.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	info := &errdetails.ErrorInfo{Domain: ErrorDomain}
	code := codes.Unknown
	for _, r := range Reasons {
		if errors.Is(err, r.Err) {
			info.Reason, code = r.Reason, r.Code
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
