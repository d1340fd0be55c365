package agent

import (
	"context"
	"fmt"
	"path/filepath"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/archive"
)

func (s *server) Remove(ctx context.Context, req *agentv1.RemoveRequest) (*agentv1.RemoveResponse, error) {
	ws, err := s.workspace()
	if err != nil {
		return nil, toStatus(fmt.Errorf("workspace: %w", err))
	}
	for _, p := range req.GetPaths() {
		if err := checkRemotePath("remove", p); err != nil {
			return nil, toStatus(err)
		}
		abs := filepath.Clean(s.abs(p))
		if abs == filepath.Dir(abs) || abs == filepath.Clean(ws) {
			return nil, toStatus(fmt.Errorf("remove %s: %w: the file system's or the workspace's root", p, ErrInvalidPath))
		}
	}
	for _, p := range req.GetPaths() {
		if err := ctx.Err(); err != nil {
			return nil, toStatus(err)
		}
		abs := filepath.Clean(s.abs(p))
		var err error
		if archive.IsStagingName(filepath.Base(abs)) {
			// A host removing the staging directory of a transfer it lost:
			// that transfer's agent may still be cleaning up after itself,
			// or still writing into it.
			err = archive.RemoveStaging(ctx, abs)
		} else {
			err = archive.RemoveTree(abs)
		}
		if err != nil {
			return nil, toStatus(fmt.Errorf("remove %s: %w", p, err))
		}
	}
	return &agentv1.RemoveResponse{}, nil
}

// Remove deletes paths in the sandbox, directories with their contents,
// in one call. A missing path is not an error; the root of the file
// system and the workspace itself are refused (ErrInvalidPath), as is
// any path before anything is removed. A path named as a staging
// directory (archive.IsStagingName) is removed only once no transfer
// holds it (archive.RemoveStaging): the call waits for that until ctx
// ends, and a path of that name that is not a directory of the agent's
// user is refused.
func (c *Client) Remove(ctx context.Context, paths ...string) error {
	for _, p := range paths {
		if err := checkRemotePath("remove", p); err != nil {
			return err
		}
	}
	if len(paths) == 0 {
		return nil
	}
	_, err := c.rpc.Remove(ctx, &agentv1.RemoveRequest{Paths: paths})
	return c.callErr(opPaths("remove", paths), err)
}
