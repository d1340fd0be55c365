package agent

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/archive"
)

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
		if err := wire.CheckRemotePath("stat", p); err != nil {
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
