package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// maxStatPaths bounds one Stat call.
const maxStatPaths = 1 << 16

func (s *server) Stat(ctx context.Context, req *agentv1.StatRequest) (*agentv1.StatResponse, error) {
	if len(req.GetPaths()) > maxStatPaths {
		return nil, wire.ToStatus(fmt.Errorf("stat: %w: %d paths, at most %d", wire.ErrInvalidPath, len(req.GetPaths()), maxStatPaths))
	}
	resp := &agentv1.StatResponse{Entries: make([]*agentv1.Entry, 0, len(req.GetPaths()))}
	for _, p := range req.GetPaths() {
		if err := ctx.Err(); err != nil {
			return nil, wire.ToStatus(err)
		}
		if err := wire.CheckRemotePath("stat", p); err != nil {
			return nil, wire.ToStatus(err)
		}
		e, err := statPath(s.abs(p), req.GetFollow())
		if err != nil {
			return nil, wire.ToStatus(err)
		}
		e.Path = p
		resp.Entries = append(resp.Entries, e)
	}
	return resp, nil
}

// statPath reports what is at p as POSIX mode's stat.sh does: with follow,
// a symlink is what it points to, and a dangling one (or a loop) a
// symlink. A path whose parent is missing, not a directory or not
// searchable is missing.
func statPath(p string, follow bool) (*agentv1.Entry, error) {
	var fi fs.FileInfo
	var err error
	if follow {
		fi, err = os.Stat(p)
		if err != nil {
			if lfi, lerr := os.Lstat(p); lerr == nil && lfi.Mode()&fs.ModeSymlink != 0 {
				fi, err = lfi, nil
			}
		}
	} else {
		fi, err = os.Lstat(p)
	}
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR), errors.Is(err, fs.ErrPermission):
		return &agentv1.Entry{Kind: agentv1.Kind_KIND_MISSING}, nil
	default:
		return nil, err
	}
	e := &agentv1.Entry{
		Size:          fi.Size(),
		MtimeUnixNano: fi.ModTime().UnixNano(),
		Mode:          unixMode(fi.Mode()),
	}
	switch m := fi.Mode(); {
	case m.IsDir():
		e.Kind = agentv1.Kind_KIND_DIR
	case m.IsRegular():
		e.Kind = agentv1.Kind_KIND_FILE
	case m&fs.ModeSymlink != 0:
		e.Kind = agentv1.Kind_KIND_SYMLINK
	default:
		e.Kind = agentv1.Kind_KIND_OTHER
	}
	return e, nil
}

// unixMode is archive.ModeBits as Entry.mode carries it.
func unixMode(m fs.FileMode) uint32 { return uint32(archive.ModeBits(m)) }
