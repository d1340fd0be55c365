package ferry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// Sandbox is one sandbox reached through an exec channel, and how files
// move to and from it.
type Sandbox struct {
	X    relay.Execer
	Name string
	// Mode chooses agent or POSIX mode; the zero value is transfer.ModeAuto.
	Mode transfer.Mode
	// Compress is how agent mode compresses data on the wire.
	Compress frame.Mode
	// Agents are the agent builds to install; without them transfer.ModeAuto is
	// POSIX mode.
	Agents agent.Bundle
	// AgentMemory, when set, remembers where the agent has answered, so
	// that a later connection there sends its first call without waiting
	// for the agent's hello (agent.Memory). Should the agent no longer
	// run there, Upload, Download, Pull, Manifest, a session's save and
	// restore, and a Run's inputs in auto mode find it at that call and
	// go on in POSIX mode, and the sandbox is forgotten. (A Launcher's
	// sandboxes are in agent mode, where there is nothing to go on in.)
	AgentMemory agent.Memory
	// IdleTimeout ends an Upload, Download, Pull, SaveSession or
	// RestoreSession (and a Run's transfers) through which next to nothing
	// has moved on the exec channel, in either direction, for this long,
	// with ErrIdle: a sandbox that sends nothing, dribbles, or stops
	// reading cannot hold one forever. A slow but steady stream is
	// progress, and so is a save waiting for a prune of its store. Zero is
	// DefaultIdleTimeout; negative turns it off. Commands (Run's, exec's)
	// are not subject to it: they may be silent for long.
	IdleTimeout time.Duration
	// Logger receives what ferry decides (the mode, an install); nil
	// discards it.
	Logger *slog.Logger
}

// target is what transfer.Open needs of s.
func (s Sandbox) target() transfer.Target {
	return transfer.Target{X: s.X, Name: s.Name, Mode: s.Mode, Compress: s.Compress, Agents: s.Agents, AgentMemory: s.AgentMemory, Logger: s.Logger}
}

// open connects to the sandbox in the sandbox's mode.
func (s Sandbox) open(ctx context.Context) (transfer.Remote, error) {
	return transfer.Open(ctx, s.target())
}

// use runs op on a connection to sb and closes it; a failed Close is an
// error named by label when op has none.
//
// In auto mode, a sandbox that AgentMemory has (its first calls go before
// the agent's hello) but where the agent can no longer run fails op's
// first agent call with agent.ErrUnavailable, where Open would have
// chosen POSIX mode: the early calls changed nothing (the agent reads
// only until its hello is in), and the memory has forgotten the sandbox.
// op runs again, on a connection Open makes anew.
func use[T any](ctx context.Context, sb Sandbox, label string, op func(transfer.Remote) (T, error)) (T, error) {
	r, err := sb.open(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	// Whichever connection is current, should op panic; Close twice is
	// harmless, as before.
	defer func() { r.Close() }()
	v, err := op(r)
	if sb.agentGone(r, err) {
		r.Close()
		if r, err = sb.open(ctx); err != nil {
			var zero T
			return zero, err
		}
		v, err = op(r)
	}
	if cerr := r.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("%s: %w", label, cerr)
	}
	return v, err
}

// agentGone reports whether err, from an operation through r, is the
// agent of a remembered sandbox that no longer runs there, found at the
// first agent call (see use): the operation changed nothing in the
// sandbox, and opening it again reaches it in POSIX mode. It logs that
// the operation goes on that way.
func (s Sandbox) agentGone(r transfer.Remote, err error) bool {
	if err == nil || r == nil || s.Mode != transfer.ModeAuto || s.AgentMemory == nil || r.Mode() != transfer.ModeAgent || !errors.Is(err, agent.ErrUnavailable) {
		return false
	}
	s.log().Info("the agent no longer runs here; opening again", "sandbox", s.Name, "reason", err)
	return true
}

// log is s.Logger, or a logger that discards.
func (s Sandbox) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// Upload copies local sources to dst in the sandbox with `cp -r`
// semantics: a directory into an existing directory lands as
// dst/basename, a directory to a missing path creates it with the
// directory's contents, "src/." copies the contents, a file to a missing
// path is a rename, and several sources need an existing directory.
func Upload(ctx context.Context, sb Sandbox, srcs []string, dst string) (_ transfer.Stats, err error) {
	start := time.Now()
	if len(srcs) == 0 {
		return transfer.Stats{}, errors.New("upload: no sources")
	}
	ctx, sb, idle := sb.watchIdle(ctx, fmt.Sprintf("upload to %s:%s", sb.Name, dst))
	defer func() { err = idle.end(err) }()
	cs, err := use(ctx, sb, fmt.Sprintf("upload to %s:%s", sb.Name, dst), func(r transfer.Remote) (transfer.Stats, error) {
		cs, err := transfer.Upload(ctx, r, srcs, dst)
		cs.Mode = r.Mode().String()
		return cs, err
	})
	if err != nil {
		return transfer.Stats{}, err
	}
	cs.Seconds = time.Since(start).Seconds()
	return cs, nil
}

// Download copies sources in the sandbox to the local dst with the same
// semantics as Upload. Nothing is placed until the whole stream has been
// checked, and only the sources asked for are placed: a stream that
// carries anything else is refused (archive.ErrUnrequested).
func Download(ctx context.Context, sb Sandbox, srcs []string, dst string, limits archive.Limits) (_ transfer.Stats, err error) {
	start := time.Now()
	if len(srcs) == 0 {
		return transfer.Stats{}, errors.New("download: no sources")
	}
	ctx, sb, idle := sb.watchIdle(ctx, fmt.Sprintf("download %s:%s", sb.Name, strings.Join(srcs, ",")))
	defer func() { err = idle.end(err) }()
	// "Nothing arrived where something was asked" is transfer.ErrShort,
	// against the sandbox's own count; an empty directory is a whole copy.
	total, err := use(ctx, sb, "download from "+sb.Name, func(r transfer.Remote) (transfer.Stats, error) {
		total, err := transfer.Download(ctx, r, srcs, dst, limits)
		total.Mode = r.Mode().String()
		return total, err
	})
	if err != nil {
		return transfer.Stats{}, err
	}
	total.Seconds = time.Since(start).Seconds()
	return total, nil
}
