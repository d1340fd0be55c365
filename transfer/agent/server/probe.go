package server

import (
	"context"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
)

func (s *server) Probe(ctx context.Context, req *agentv1.ProbeRequest) (*agentv1.ProbeResponse, error) {
	ws, err := s.workspace()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "workspace: %v", err)
	}
	p := s.abs(req.GetPath())
	if req.GetPath() == "" {
		p = ws
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(p, &fs); err != nil {
		return nil, status.Errorf(codes.NotFound, "statfs %s: %v", p, err)
	}
	tmp := s.cfg.TempDir
	if tmp == "" {
		tmp = os.TempDir()
	}
	return &agentv1.ProbeResponse{
		Os:        runtime.GOOS,
		Arch:      runtime.GOARCH,
		Uid:       uint32(os.Getuid()),
		Gid:       uint32(os.Getgid()),
		Workspace: ws,
		FreeBytes: fs.Bavail * uint64(fs.Bsize),
		TempDir:   tmp,
		Version:   s.cfg.Version,
	}, nil
}

// workspace is the absolute directory relative paths start from.
func (s *server) workspace() (string, error) {
	if s.cfg.Workspace != "" {
		return filepath.Abs(s.cfg.Workspace)
	}
	return os.Getwd()
}

// abs resolves a request path: absolute as given, else under the
// workspace. It does not clean away "..": where that is refused, the
// operation refuses it.
func (s *server) abs(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	ws, err := s.workspace()
	if err != nil {
		return p
	}
	return filepath.Join(ws, p)
}
