package agent

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/relay"
)

// ErrShrunk reports a followed file that no longer continues what was
// read from it: it is shorter than an offset already received (truncated),
// or another file has taken its path (replaced). Whatever the host holds
// cannot be extended from it, so the agent refuses rather than send bytes
// that do not belong after the offset.
var ErrShrunk = errors.New("agent: followed file truncated or replaced")

// FollowFile is a file for [Client.Follow]: a path on the agent's side
// (relative to its workspace, or absolute) and the offset to start at.
type FollowFile struct {
	Path   string
	Offset int64
}

// Follow streams files from the agent as they grow, calling fn with each
// piece in order: for each file, the pieces are contiguous from its
// Offset. fn runs on the calling goroutine and must not keep data after it
// returns; an error from fn ends the stream and is returned as is.
// With stopWhen set, Follow returns nil once that path exists on the agent's
// side and every file has been sent to its end after that moment; without
// it, Follow returns only on an error or when ctx ends (with an error that
// wraps ctx.Err()). A file that was truncated or replaced gives an error
// wrapping [ErrShrunk]; a lost connection one that [IsConnLost] reports.
func (c *Client) Follow(ctx context.Context, files []FollowFile, stopWhen string, fn func(file int, offset int64, data []byte) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := &agentv1.FollowRequest{StopWhen: stopWhen}
	next := make([]int64, len(files))
	for i, f := range files {
		req.Files = append(req.Files, &agentv1.FollowFile{Path: f.Path, Offset: f.Offset})
		next[i] = f.Offset
	}
	st, err := c.rpc.Follow(ctx, req)
	if err != nil {
		return c.followErr(ctx, err)
	}
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return c.followErr(ctx, err)
		}
		// The agent is not trusted: every piece must continue its file.
		i := int(r.GetFile())
		if i >= len(files) {
			return fmt.Errorf("follow: agent sent file %d of %d", i, len(files))
		}
		if r.GetOffset() != next[i] {
			return fmt.Errorf("follow %s: agent sent offset %d, want %d", files[i].Path, r.GetOffset(), next[i])
		}
		if len(r.GetData()) == 0 {
			continue
		}
		next[i] += int64(len(r.GetData()))
		if err := fn(i, r.GetOffset(), r.GetData()); err != nil {
			return err
		}
	}
}

func (c *Client) followErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("follow: %w", ctx.Err())
	}
	if status.Code(err) == codes.DataLoss {
		return fmt.Errorf("follow: %w: %s", ErrShrunk, status.Convert(err).Message())
	}
	return c.wrap("follow", err)
}

// IsConnLost reports whether err from a Client's RPC means that the
// connection to the agent broke (the relay dropped, the agent died), as
// opposed to the agent refusing the request: the same request on a new
// connection may succeed.
func IsConnLost(err error) bool {
	return errors.Is(err, relay.ErrRelayLost) || errors.Is(err, ErrExited) || status.Code(err) == codes.Unavailable
}
