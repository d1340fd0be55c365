package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// maxStatPaths bounds one Stat call.
const maxStatPaths = 1 << 16

func (s *server) Stat(ctx context.Context, req *agentv1.StatRequest) (*agentv1.StatResponse, error) {
	if len(req.GetPaths()) > maxStatPaths {
		return nil, toStatus(fmt.Errorf("stat: %w: %d paths, at most %d", ErrInvalidPath, len(req.GetPaths()), maxStatPaths))
	}
	resp := &agentv1.StatResponse{Entries: make([]*agentv1.Entry, 0, len(req.GetPaths()))}
	for _, p := range req.GetPaths() {
		if err := ctx.Err(); err != nil {
			return nil, toStatus(err)
		}
		if err := checkRemotePath("stat", p); err != nil {
			return nil, toStatus(err)
		}
		e, err := statPath(s.abs(p), req.GetFollow())
		if err != nil {
			return nil, toStatus(err)
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

// Entry is what the agent reports about one path.
type Entry struct {
	// Path is the path as asked for.
	Path string
	Kind archive.Kind
	// Size, ModTime and Mode (permission bits, setuid, setgid and sticky)
	// are zero for a missing path.
	Size    int64
	ModTime time.Time
	Mode    fs.FileMode
}

var kinds = map[agentv1.Kind]archive.Kind{
	agentv1.Kind_KIND_MISSING: archive.Missing,
	agentv1.Kind_KIND_DIR:     archive.Dir,
	agentv1.Kind_KIND_FILE:    archive.File,
	agentv1.Kind_KIND_SYMLINK: archive.Symlink,
	agentv1.Kind_KIND_OTHER:   archive.Other,
}

// Stat reports what is at path in the sandbox (relative paths start at the
// workspace). With follow a final symlink is followed, as cp does for a
// destination: a link to a directory is Dir, a dangling one Symlink.
// Without, a symlink is Symlink. A missing path is Missing, not an error.
func (c *Client) Stat(ctx context.Context, path string, follow bool) (archive.Kind, error) {
	es, err := c.StatAll(ctx, []string{path}, follow)
	if err != nil {
		return archive.Missing, err
	}
	return es[0].Kind, nil
}

// StatAll is Stat for several paths in one call; the entries come in the
// order of paths.
func (c *Client) StatAll(ctx context.Context, paths []string, follow bool) ([]Entry, error) {
	for _, p := range paths {
		if err := checkRemotePath("stat", p); err != nil {
			return nil, err
		}
	}
	r, err := c.rpc.Stat(ctx, &agentv1.StatRequest{Paths: paths, Follow: follow})
	if err != nil {
		return nil, c.callErr(opPaths("stat", paths), err)
	}
	if len(r.GetEntries()) != len(paths) {
		return nil, fmt.Errorf("stat: the agent answered %d entries for %d paths", len(r.GetEntries()), len(paths))
	}
	out := make([]Entry, len(paths))
	for i, e := range r.GetEntries() {
		k, ok := kinds[e.GetKind()]
		if !ok {
			return nil, fmt.Errorf("stat %s: the agent answered an unknown kind %d", paths[i], e.GetKind())
		}
		out[i] = Entry{Path: paths[i], Kind: k}
		if k != archive.Missing {
			out[i].Size = e.GetSize()
			out[i].ModTime = time.Unix(0, e.GetMtimeUnixNano())
			out[i].Mode = archive.GoMode(int64(e.GetMode()))
		}
	}
	return out, nil
}
