package server

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
)

func (s *server) Get(req *agentv1.GetRequest, stream agentv1.Agent_GetServer) error {
	return wire.ToStatus(s.get(req, stream))
}

func (s *server) get(req *agentv1.GetRequest, stream agentv1.Agent_GetServer) error {
	ctx := stream.Context()
	rd := req.GetDir()
	if rd == "" {
		rd = "."
	}
	if err := wire.CheckRemotePath("get", rd); err != nil {
		return err
	}
	if len(req.GetNames()) == 0 {
		return fmt.Errorf("get %s: %w: no names", rd, wire.ErrInvalidPath)
	}
	names := make([]string, len(req.GetNames()))
	for i, n := range req.GetNames() {
		c, err := wire.MemberName("get", n)
		if err != nil {
			return err
		}
		names[i] = c
	}
	var mode frame.Mode
	found := false
	for m, v := range wire.Compressions {
		if v == req.GetCompression() {
			mode, found = m, true
		}
	}
	if !found {
		return status.Errorf(codes.InvalidArgument, "get %s: unknown compression %v", rd, req.GetCompression())
	}
	// As POSIX mode's download.sh: dir is followed (cd), every name must
	// exist (a dangling symlink does), and is then archived as it is.
	dir := s.abs(rd)
	if fi, err := os.Stat(dir); err != nil {
		if !req.GetFilesOnly() || !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		names = nil // nothing there: an empty archive
	} else if !fi.IsDir() {
		return &fs.PathError{Op: "get", Path: dir, Err: syscall.ENOTDIR}
	}
	kept := names[:0]
	for _, n := range names {
		if n == "." {
			kept = append(kept, n)
			continue
		}
		fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(n)))
		switch {
		case req.GetFilesOnly() && (errors.Is(err, fs.ErrNotExist) || err == nil && !fi.Mode().IsRegular()):
			continue
		case err != nil:
			return err
		}
		kept = append(kept, n)
	}
	names = kept
	t := wire.NewTreeWriter(func(b []byte) error {
		return stream.Send(&agentv1.GetResponse{Msg: &agentv1.GetResponse_Data{Data: b}})
	}, archive.FormatTar, mode, 0, s.rtt)
	var err error
	for _, n := range names {
		if n == "." {
			err = t.Tar.AddRoot(ctx, dir)
		} else {
			err = t.Tar.Add(ctx, filepath.Join(dir, filepath.FromSlash(n)), n)
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		err = t.Finish()
	}
	if err != nil {
		if cerr := ctx.Err(); t.Chunks.Failed && cerr != nil {
			return cerr // the host went away; nobody reads a status
		}
		return err
	}
	return stream.Send(&agentv1.GetResponse{Msg: &agentv1.GetResponse_Trailer{Trailer: wire.TrailerOf(t.Tar)}})
}
