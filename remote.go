package ferry

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"time"

	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/frame"
	"github.com/ferry-dev/ferry/transfer/posix"
)

// Mode is how files move: through ferry's agent, or through the sandbox's
// own sh and tar.
type Mode int

const (
	// ModeAuto uses the agent where it can run and POSIX mode elsewhere.
	ModeAuto Mode = iota
	// ModeAgent uses the agent and fails, saying why, where it cannot run.
	ModeAgent
	// ModePOSIX uses the sandbox's sh, tar and cat.
	ModePOSIX
)

// ParseMode parses the --mode values "auto", "agent" and "posix".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto":
		return ModeAuto, nil
	case "agent":
		return ModeAgent, nil
	case "posix":
		return ModePOSIX, nil
	}
	return 0, fmt.Errorf("parse mode %q: want auto, agent or posix", s)
}

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeAgent:
		return "agent"
	case ModePOSIX:
		return "posix"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// item is one local source and its name in the archive.
type item struct{ src, name string }

// remote is one connection to a sandbox for the length of an operation:
// in agent mode one exec carries every call; in POSIX mode each call is
// its own exec.
type remote interface {
	mode() string
	stat(ctx context.Context, p string, follow bool) (transfer.Kind, error)
	// upload archives items and places them at dest; want is the number
	// of entries the archive holds.
	upload(ctx context.Context, items []item, dest string, place transfer.Placement, want int64) (CopyStats, error)
	// uploadStream places at dest the archive that fill writes; want is
	// the number of entries it holds (Files + Dirs + Symlinks of the
	// writer's Stats).
	uploadStream(ctx context.Context, fill func(*transfer.Writer) error, dest string, place transfer.Placement, want int64) (CopyStats, error)
	download(ctx context.Context, dir string, names []string, local string, place transfer.Placement, limits transfer.Limits) (CopyStats, error)
	// present returns which of names are regular files in dir.
	present(ctx context.Context, dir string, names []string) ([]string, error)
	close() error
}

// open connects to the sandbox in the sandbox's mode.
func (s Sandbox) open(ctx context.Context) (remote, error) {
	p := posixRemote{r: posix.Remote{X: s.X, Sandbox: s.Name}, sb: s}
	if s.Mode == ModePOSIX {
		return p, nil
	}
	log := s.log()
	c, d, err := agent.Dial(ctx, agent.DialConfig{X: s.X, Sandbox: s.Name, Bundle: s.Agents, Logger: log})
	if err != nil {
		if s.Mode == ModeAuto && errors.Is(err, agent.ErrUnavailable) {
			log.Info("agent mode unavailable; using POSIX mode", "sandbox", s.Name, "reason", err)
			return p, nil
		}
		return nil, fmt.Errorf("agent mode in %s: %w", s.Name, err)
	}
	log.Debug("agent connected", "sandbox", s.Name, "installed", d.Installed, "execs", d.Execs)
	return agentRemote{c: c, compress: s.Compress, sb: s, log: log}, nil
}

// log is s.Logger, or a logger that discards.
func (s Sandbox) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// posixRemote is POSIX mode.
type posixRemote struct {
	r  posix.Remote
	sb Sandbox
}

func (p posixRemote) mode() string { return "posix" }
func (p posixRemote) close() error { return nil }

func (p posixRemote) stat(ctx context.Context, path string, follow bool) (transfer.Kind, error) {
	if follow {
		return p.r.StatFollow(ctx, path)
	}
	return p.r.Stat(ctx, path)
}

func (p posixRemote) upload(ctx context.Context, items []item, dest string, place transfer.Placement, want int64) (CopyStats, error) {
	return p.uploadStream(ctx, addItems(ctx, items), dest, place, want)
}

func (p posixRemote) uploadStream(ctx context.Context, fill func(*transfer.Writer) error, dest string, place transfer.Placement, want int64) (CopyStats, error) {
	pr, pw := io.Pipe()
	// The tar writer makes several small writes per entry; unbuffered,
	// each became one exec-stream message (70,000 for 10,000 small files).
	bw := bufio.NewWriterSize(pw, streamBuffer)
	w := transfer.NewWriter(bw)
	werr := make(chan error, 1)
	go func() {
		err := fill(w)
		if err == nil {
			err = w.Close()
		}
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
		werr <- err
	}()
	res, err := p.r.Upload(ctx, pr, dest, posix.Placement(place), want)
	pr.CloseWithError(io.ErrClosedPipe)
	logStale(p.sb.log(), p.sb.Name, "sandbox", dest, res.Swept, nil)
	if wErr := <-werr; wErr != nil && err == nil {
		err = wErr
	}
	if err != nil {
		return CopyStats{}, err
	}
	st := w.Stats()
	return CopyStats{Files: st.Files, Dirs: st.Dirs, Symlinks: st.Symlinks, Bytes: st.Bytes, WireBytes: res.WireBytes}, nil
}

// addItems is the fill function that archives items.
func addItems(ctx context.Context, items []item) func(*transfer.Writer) error {
	return func(w *transfer.Writer) error {
		for _, it := range items {
			if err := w.Add(ctx, it.src, it.name); err != nil {
				return err
			}
		}
		return nil
	}
}

func (p posixRemote) download(ctx context.Context, dir string, names []string, local string, place transfer.Placement, limits transfer.Limits) (CopyStats, error) {
	return downloadInto(ctx, p.r, dir, names, local, place, limits, func(n int, err error) { logStale(p.sb.log(), p.sb.Name, "host", local, n, err) })
}

func (p posixRemote) present(ctx context.Context, dir string, names []string) ([]string, error) {
	return listPresent(ctx, p.sb, dir, names)
}

// agentRemote is agent mode.
type agentRemote struct {
	c        *agent.Client
	compress frame.Mode
	sb       Sandbox
	log      *slog.Logger
}

func (a agentRemote) mode() string { return "agent" }
func (a agentRemote) close() error { return a.c.Close() }

func (a agentRemote) stat(ctx context.Context, p string, follow bool) (transfer.Kind, error) {
	return a.c.Stat(ctx, p, follow)
}

func (a agentRemote) upload(ctx context.Context, items []item, dest string, place transfer.Placement, want int64) (CopyStats, error) {
	return a.uploadStream(ctx, addItems(ctx, items), dest, place, want)
}

func (a agentRemote) uploadStream(ctx context.Context, fill func(*transfer.Writer) error, dest string, place transfer.Placement, want int64) (CopyStats, error) {
	staging := transfer.StagingPrefix + randomTag()
	res, err := a.c.Put(ctx, agent.PutSpec{Dest: dest, Place: place, Compress: a.compress, Staging: staging}, fill)
	logStale(a.log, a.sb.Name, "sandbox", dest, res.StaleStaging, nil)
	if err != nil {
		if a.c.Lost() {
			a.removeStaging(ctx, path.Join(transfer.StagingParent(dest, place), staging))
		}
		return CopyStats{}, err
	}
	if res.Entries != want {
		// The tree changed while it was archived: what the agent checked
		// is what was sent, but it is not what was counted.
		return CopyStats{}, fmt.Errorf("%w: %d entries counted, %d sent", ErrShort, want, res.Entries)
	}
	return statsOf(res), nil
}

func (a agentRemote) download(ctx context.Context, dir string, names []string, local string, place transfer.Placement, limits transfer.Limits) (CopyStats, error) {
	res, err := a.c.Get(ctx, agent.GetSpec{Dir: dir, Names: names, Local: local, Place: place, Limits: limits, Compress: a.compress})
	logStale(a.log, a.sb.Name, "host", local, res.StaleStaging, nil)
	if err != nil {
		return CopyStats{}, err
	}
	return statsOf(res), nil
}

func (a agentRemote) present(ctx context.Context, dir string, names []string) ([]string, error) {
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = path.Join(dir, n)
	}
	es, err := a.c.StatAll(ctx, paths, false)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, e := range es {
		if e.Kind == transfer.File {
			out = append(out, names[i])
		}
	}
	return out, nil
}

// removeStaging removes what an agent lost mid-put left, through a new
// connection. The lost agent may still be cleaning up after itself, or
// still writing: the new one waits (within the 30s here) until it lets go
// of the directory. A sandbox that cannot be reached keeps it (a hidden
// directory beside the destination, never the destination), until the
// next transfer that stages in the same directory finds it stale and
// removes it.
func (a agentRemote) removeStaging(ctx context.Context, p string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeStagingWait)
	defer cancel()
	c, _, err := agent.Dial(ctx, agent.DialConfig{X: a.sb.X, Sandbox: a.sb.Name, Bundle: a.sb.Agents, Logger: a.log})
	if err == nil {
		err = c.Remove(ctx, p)
		c.Close()
	}
	if err != nil {
		a.log.Warn("cannot remove the staging directory of a failed upload now; the next transfer into its directory will", "sandbox", a.sb.Name, "path", p, "err", err)
		return
	}
	a.log.Debug("removed the staging directory of a failed upload", "sandbox", a.sb.Name, "path", p)
}

// removeStagingWait bounds removeStaging.
const removeStagingWait = 30 * time.Second

// logStale logs the stale staging directories of earlier transfers that
// a transfer to dest removed before it staged its own (side "sandbox" or
// "host", where dest is), and a failure to remove one.
func logStale(log *slog.Logger, sandbox, side, dest string, n int, err error) {
	if n > 0 {
		log.Info("removed stale staging directories of earlier transfers", "sandbox", sandbox, "side", side, "dest", dest, "count", n)
	}
	if err != nil {
		log.Warn("cannot remove a stale staging directory", "sandbox", sandbox, "side", side, "dest", dest, "err", err)
	}
}

// randomTag is 16 random hex digits.
func randomTag() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func statsOf(r agent.Result) CopyStats {
	return CopyStats{Files: r.Files, Dirs: r.Dirs, Symlinks: r.Symlinks, Bytes: r.Bytes, WireBytes: r.WireBytes}
}
