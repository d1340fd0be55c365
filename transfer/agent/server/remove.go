package server

import (
	"context"
	"fmt"
	"path/filepath"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/archive"
)

func (s *server) Remove(ctx context.Context, req *agentv1.RemoveRequest) (*agentv1.RemoveResponse, error) {
	ws, err := s.workspace()
	if err != nil {
		return nil, wire.ToStatus(fmt.Errorf("workspace: %w", err))
	}
	for _, p := range req.GetPaths() {
		if err := wire.CheckRemotePath("remove", p); err != nil {
			return nil, wire.ToStatus(err)
		}
		abs := filepath.Clean(s.abs(p))
		if abs == filepath.Dir(abs) || abs == filepath.Clean(ws) {
			return nil, wire.ToStatus(fmt.Errorf("remove %s: %w: the file system's or the workspace's root", p, wire.ErrInvalidPath))
		}
	}
	for _, p := range req.GetPaths() {
		if err := ctx.Err(); err != nil {
			return nil, wire.ToStatus(err)
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
			return nil, wire.ToStatus(fmt.Errorf("remove %s: %w", p, err))
		}
	}
	return &agentv1.RemoveResponse{}, nil
}
