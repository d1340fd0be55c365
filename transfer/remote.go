package transfer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
	"github.com/ferry-dev/ferry/transfer/posix"
)

// Target is a sandbox and how to reach it: what Open needs.
type Target struct {
	X    relay.Execer
	Name string
	// Mode chooses agent or POSIX mode; the zero value is ModeAuto.
	Mode Mode
	// Compress is how agent mode compresses data on the wire.
	Compress frame.Mode
	// Agents are the agent builds to install; without them ModeAuto is
	// POSIX mode.
	Agents agent.Bundle
	// AgentMemory, when set, remembers where the agent has answered:
	// there, Open's connection sends its first call without waiting for
	// the agent's hello, a round trip sooner (agent.Memory).
	AgentMemory agent.Memory
	// Logger receives what Open decides (the mode, an install); nil
	// discards it.
	Logger *slog.Logger
}

func (t Target) log() *slog.Logger {
	if t.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return t.Logger
}

// Remote is one connection to a sandbox for the length of an operation:
// in agent mode one exec carries every call; in POSIX mode each call is
// its own exec. It is not safe for concurrent use.
type Remote interface {
	// Target is the sandbox this connects to, for what goes beside the
	// connection: a message naming it, an exec of the sandbox's sh.
	Target() Target
	// Mode is ModeAgent or ModePOSIX: the mode Open chose.
	Mode() Mode
	// Agent is the agent connection in agent mode, for what only the
	// agent does (sessions, detached runs); nil in POSIX mode.
	Agent() *agent.Client
	// Stat reports what p is, following a final symlink when follow is
	// set.
	Stat(ctx context.Context, p string, follow bool) (archive.Kind, error)
	// Upload places the archive that fill writes as spec says.
	Upload(ctx context.Context, spec UploadSpec, fill Fill) (Stats, error)
	// Download extracts what spec names from the sandbox.
	Download(ctx context.Context, spec DownloadSpec) (Stats, error)
	// Present returns which of names are regular files in dir.
	Present(ctx context.Context, dir string, names []string) ([]string, error)
	// Close ends the connection; in agent mode it reports how the agent
	// ended.
	Close() error
}

// UploadSpec is where a Remote's Upload goes.
type UploadSpec struct {
	// Dest is the sandbox path the archive is placed at (or into).
	Dest  string
	Place archive.Placement
	// Entries is how many entries the archive holds (Files + Dirs +
	// Symlinks of the writer's Stats), which the sandbox must count too:
	// fewer is ErrShort.
	Entries int64
	// Count, when set, finds Entries (a walk of the local tree). A Remote
	// that checks the count only once the stream is over (agent mode,
	// against its trailer) runs it beside the stream, so that the walk
	// is not a pause before the first byte; others run it first.
	Count func(context.Context) (int64, error)
	// IntoIfDir, with Place PlaceAs, places into Dest instead when Dest is
	// a directory, decided in the sandbox: a copy's destination without a
	// stat first. Agent mode only (Remote.IntoIfDir).
	IntoIfDir bool
	// SrcIsDir, with IntoIfDir, says the one top-level entry is a
	// directory: placed as Dest, it is Dest itself and not counted, as a
	// directory's root entry is not when its contents become Dest.
	SrcIsDir bool
}

// DownloadSpec is what a Remote's Download takes, and where to.
type DownloadSpec struct {
	// Dir is the sandbox directory Names are entries of.
	Dir   string
	Names []string
	// Local is the host path the entries are placed at (or into).
	Local  string
	Place  archive.Placement
	Limits archive.Limits
	// FilesOnly downloads those of Names that are regular files and
	// leaves out the rest (missing, directories, symlinks) instead of
	// failing; a missing Dir gives nothing. What came is what Local
	// holds. In agent mode it saves the stat a caller would make first.
	FilesOnly bool
}

// Fill writes an upload's entries.
type Fill func(*archive.Writer) error

// Item is one local source and its name in an upload's archive.
type Item struct{ Src, Name string }

// Items is the Fill that archives items in order.
func Items(ctx context.Context, items ...Item) Fill {
	return func(w *archive.Writer) error {
		for _, it := range items {
			if err := w.Add(ctx, it.Src, it.Name); err != nil {
				return err
			}
		}
		return nil
	}
}

// Stats is what a copy moved, in the shape `ferry cp --json` prints.
type Stats struct {
	Files     int64   `json:"files"`
	Dirs      int64   `json:"dirs"`
	Symlinks  int64   `json:"symlinks"`
	Bytes     int64   `json:"bytes"`
	WireBytes int64   `json:"wire_bytes"`
	Seconds   float64 `json:"seconds"`
	Mode      string  `json:"mode"`
}

func (s *Stats) add(o Stats) {
	s.Files += o.Files
	s.Dirs += o.Dirs
	s.Symlinks += o.Symlinks
	s.Bytes += o.Bytes
	s.WireBytes += o.WireBytes
}

var (
	// ErrNoSource means a source named in a copy does not exist.
	ErrNoSource = errors.New("ferry: no such source")
	// ErrNotDir means the destination must be an existing directory
	// (several sources, a trailing slash) and is not.
	ErrNotDir = errors.New("ferry: destination is not a directory")
	// ErrShort means fewer entries arrived than the sender counted, in
	// either mode and either direction.
	ErrShort = archive.ErrShort
	// ErrAgentRequired means an operation needs agent mode (a detached
	// run, a live follow, a Remote opened in ModeAgent) and cannot have
	// it: POSIX mode was asked for, or the agent cannot run in the
	// sandbox, in which case the error also matches agent.ErrUnavailable
	// and says why.
	ErrAgentRequired = errors.New("ferry: needs the agent")
)

// MayUseAgent reports whether Open may connect t in agent mode: ModeAgent,
// or ModeAuto with agent builds to install (without them agent.Dial is
// unavailable at once, and Open falls back to POSIX mode).
func (t Target) MayUseAgent() bool {
	return t.Mode == ModeAgent || t.Mode == ModeAuto && len(t.Agents) > 0
}

// Open connects to the sandbox in t's mode. In ModeAuto a sandbox where
// the agent cannot run (agent.ErrUnavailable) is POSIX mode.
func Open(ctx context.Context, t Target) (Remote, error) {
	p := posixRemote{r: posix.Remote{X: t.X, Sandbox: t.Name}, t: t}
	if t.Mode == ModePOSIX {
		return p, nil
	}
	log := t.log()
	c, d, err := agent.Dial(ctx, agent.DialConfig{X: t.X, Sandbox: t.Name, Bundle: t.Agents, Memory: t.AgentMemory, Logger: log})
	if err != nil {
		if t.Mode == ModeAuto && errors.Is(err, agent.ErrUnavailable) {
			log.Info("agent mode unavailable; using POSIX mode", "sandbox", t.Name, "reason", err)
			return p, nil
		}
		if errors.Is(err, agent.ErrUnavailable) {
			return nil, fmt.Errorf("agent mode in %s: %w: %w", t.Name, ErrAgentRequired, err)
		}
		return nil, fmt.Errorf("agent mode in %s: %w", t.Name, err)
	}
	log.Debug("agent connected", "sandbox", t.Name, "installed", d.Installed, "execs", d.Execs)
	return agentRemote{c: c, t: t, log: log}, nil
}

// RemoveStaging removes the staging directory p that an agent lost
// mid-transfer left, through a new connection. The lost agent may still
// be cleaning up after itself, or still writing: the new one waits
// (within 30s) until it lets go of the directory. A sandbox that cannot be
// reached keeps it (a hidden directory beside the destination, never the
// destination), until the next transfer that stages in the same directory
// finds it stale and removes it.
//
// Several paths are the places the directory may be in (an upload whose
// agent chose between two); one that is not there is no error.
func RemoveStaging(ctx context.Context, t Target, paths ...string) {
	log := t.log()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeStagingWait)
	defer cancel()
	c, _, err := agent.Dial(ctx, agent.DialConfig{X: t.X, Sandbox: t.Name, Bundle: t.Agents, Memory: t.AgentMemory, Logger: log})
	if err != nil {
		log.Warn("cannot remove the staging directory of a failed upload now; the next transfer into its directory will", "sandbox", t.Name, "paths", paths, "err", err)
		return
	}
	defer c.Close()
	for _, p := range paths {
		err := c.Remove(ctx, p)
		if err != nil && !(len(paths) > 1 && errors.Is(err, fs.ErrNotExist)) {
			log.Warn("cannot remove the staging directory of a failed upload now; the next transfer into its directory will", "sandbox", t.Name, "path", p, "err", err)
			continue
		}
		if err == nil {
			log.Debug("removed the staging directory of a failed upload", "sandbox", t.Name, "path", p)
		}
	}
}

// removeStagingWait bounds RemoveStaging.
const removeStagingWait = 30 * time.Second

// LogStale logs, to t's Logger, the n stale staging directories of
// earlier transfers that a transfer to dest removed before it staged its
// own (side "sandbox" or "host", where dest is), and a failure to remove
// one.
func (t Target) LogStale(side, dest string, n int, err error) {
	log := t.log()
	if n > 0 {
		log.Info("removed stale staging directories of earlier transfers", "sandbox", t.Name, "side", side, "dest", dest, "count", n)
	}
	if err != nil {
		log.Warn("cannot remove a stale staging directory", "sandbox", t.Name, "side", side, "dest", dest, "err", err)
	}
}

// StatsOf is the Stats of an agent transfer.
func StatsOf(r agent.Result) Stats {
	return Stats{Files: r.Files, Dirs: r.Dirs, Symlinks: r.Symlinks, Bytes: r.Bytes, WireBytes: r.WireBytes}
}

// ExitError is a command in the sandbox that exited non-zero, in either
// mode: a step of a POSIX-mode transfer (tar, mkdir, mv) or a Shell
// script. It is posix.ExitError, one type for callers to branch on.
type ExitError = posix.ExitError

// Shell runs script with args in t's sh and returns its stdout (at most
// 64 KiB); a non-zero exit is an *ExitError with its stderr. It is for the few
// steps beside a transfer that are a command, not a tree (probing a
// target, swapping a tree in, tightening modes); args are passed as
// arguments, never spliced into the script.
func Shell(ctx context.Context, t Target, script string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	code, err := t.X.Exec(ctx, &relay.Command{
		Sandbox: t.Name,
		Argv:    append([]string{"sh", "-c", script, "sh"}, args...),
		Stdout:  &limitedBuffer{buf: &out, max: 64 << 10},
		Stderr:  &limitedBuffer{buf: &errb, max: 4 << 10},
	})
	if err != nil {
		return "", err
	}
	if code != 0 {
		return "", &ExitError{Op: "sh", Code: code, Stderr: strings.TrimSpace(errb.String())}
	}
	return out.String(), nil
}
