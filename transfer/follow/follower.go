package follow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/ferry-dev/ferry/transfer/agent"
)

// Config is what a Follower follows and how. It is not changed after New.
type Config struct {
	// Dial connects to the agent; required. It is called again after
	// every lost connection. Run closes each client Dial returns.
	Dial func(ctx context.Context) (*agent.Client, error)
	// RemoteDir is the directory the files are in on the agent's side:
	// relative to its workspace, or absolute. Empty is the workspace.
	RemoteDir string
	// OutDir is the local directory the copies are appended to; required.
	// It is created (0700) if missing, the files (0600) too.
	OutDir string
	// Files are the names followed, the same in RemoteDir and in OutDir:
	// plain names, no directories; at least one.
	Files []string
	// Lines, when set, receives every byte of Files[0] once, in order,
	// written a complete line at a time: a partial last line waits for
	// its newline, or for the end of Run, which writes it as it is. A
	// line longer than 4 MiB is written in pieces, so that memory stays
	// bounded. What the local copy held before Run is not written again.
	Lines io.Writer
	// StopWhen, when set, ends Run (with nil) once this path exists on
	// the agent's side and every file has been copied to its end after
	// that: relative to RemoteDir, or absolute. Empty follows until ctx
	// ends.
	StopWhen string
	// Logger receives the follower's log lines; nil discards them.
	Logger *slog.Logger
	// Retries is how many attempts in a row may fail (a dial that fails,
	// or a connection lost before it delivered anything or stayed up for
	// 30s) before Run gives up; default 8.
	Retries int
	// Backoff is the wait after the first failed attempt, doubled after
	// each further one up to MaxBackoff; defaults 100ms and 5s.
	Backoff, MaxBackoff time.Duration
	// SyncEvery is how often a file that is receiving data is fsynced;
	// default 1s. Every file is fsynced when Run returns.
	SyncEvery time.Duration
}

// stableAfter: a connection that stayed up this long counts as a success
// even if it delivered nothing (a quiet agent), so that occasional drops
// over a long run never add up to Retries.
const stableAfter = 30 * time.Second

// maxLine bounds the partial line held back from Config.Lines.
const maxLine = 4 << 20

func (c *Config) applyDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Retries <= 0 {
		c.Retries = 8
	}
	if c.Backoff <= 0 {
		c.Backoff = 100 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 5 * time.Second
	}
	c.MaxBackoff = max(c.MaxBackoff, c.Backoff)
	if c.SyncEvery <= 0 {
		c.SyncEvery = time.Second
	}
}

// Follower copies growing remote files to local ones; see the package
// documentation.
type Follower struct {
	cfg Config
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Follower, error) {
	if cfg.Dial == nil {
		return nil, errors.New("follow: no Dial")
	}
	if cfg.OutDir == "" {
		return nil, errors.New("follow: no OutDir")
	}
	if len(cfg.Files) == 0 {
		return nil, errors.New("follow: no Files")
	}
	seen := map[string]bool{}
	for _, name := range cfg.Files {
		if name == "" || name == "." || name == ".." || filepath.Base(name) != name || path.Base(name) != name {
			return nil, fmt.Errorf("follow: file %q is not a plain name", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("follow: file %q twice", name)
		}
		seen[name] = true
	}
	cfg.Files = append([]string(nil), cfg.Files...)
	cfg.applyDefaults()
	return &Follower{cfg: cfg}, nil
}

// Run follows the files until StopWhen is reached (it returns nil), ctx
// ends (it returns ctx.Err()), the agent refuses (a truncated or replaced
// file gives an error wrapping [agent.ErrShrunk]), a local write fails, or
// Retries attempts in a row fail. Each connection starts from the local
// files' sizes, so Run resumes where an earlier Run stopped. However it
// returns, every byte received has been written and fsynced, and the files
// are closed. Run may be called again, but not concurrently.
func (f *Follower) Run(ctx context.Context) (err error) {
	cfg := &f.cfg
	if err := os.MkdirAll(cfg.OutDir, 0o700); err != nil {
		return fmt.Errorf("follow: create %s: %w", cfg.OutDir, err)
	}
	locals := make([]*local, 0, len(cfg.Files))
	lines := &lineWriter{w: cfg.Lines}
	defer func() {
		var errs []error
		if ferr := lines.flush(); ferr != nil {
			errs = append(errs, fmt.Errorf("follow: write lines: %w", ferr))
		}
		for _, l := range locals {
			if cerr := l.close(); cerr != nil {
				errs = append(errs, cerr)
			}
		}
		err = errors.Join(append([]error{err}, errs...)...)
	}()
	for _, name := range cfg.Files {
		l, err := openLocal(filepath.Join(cfg.OutDir, name), cfg.SyncEvery)
		if err != nil {
			return err
		}
		locals = append(locals, l)
	}
	stop := cfg.StopWhen
	if stop != "" && !path.IsAbs(stop) {
		stop = path.Join(cfg.RemoteDir, stop)
	}

	failures := 0
	for {
		start := time.Now()
		delivered, err := f.session(ctx, locals, lines, stop)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ve *agent.VersionError
		if errors.As(err, &ve) || !retryable(err) {
			var de *dialError
			if errors.As(err, &de) {
				return fmt.Errorf("follow: %w", err)
			}
			return err
		}
		if delivered || time.Since(start) >= stableAfter {
			failures = 0
		}
		failures++
		if failures >= cfg.Retries {
			return fmt.Errorf("follow: giving up after %d failed attempts in a row: %w", failures, err)
		}
		wait := min(cfg.Backoff<<min(failures-1, 16), cfg.MaxBackoff)
		cfg.Logger.Warn("follow: retrying", "err", err, "after", wait,
			"attempt", failures, "up", time.Since(start).Round(time.Millisecond), "offsets", offsets(locals))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// dialError marks a failed dial: retried like a lost connection.
type dialError struct{ err error }

func (e *dialError) Error() string { return "dial: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

func retryable(err error) bool {
	if errors.Is(err, agent.ErrUnavailable) {
		// The agent cannot run there: asking again will not change it.
		return false
	}
	var de *dialError
	return errors.As(err, &de) || agent.IsConnLost(err)
}

// session is one connection: it dials, follows from the local offsets and
// reports whether anything arrived.
func (f *Follower) session(ctx context.Context, locals []*local, lines *lineWriter, stop string) (delivered bool, err error) {
	cfg := &f.cfg
	c, err := cfg.Dial(ctx)
	if err != nil {
		return false, &dialError{err}
	}
	defer c.Close()
	files := make([]agent.FollowFile, len(locals))
	for i, l := range locals {
		files[i] = agent.FollowFile{Path: path.Join(cfg.RemoteDir, cfg.Files[i]), Offset: l.off}
	}
	cfg.Logger.Debug("follow: connected", "offsets", offsets(locals))
	err = c.Follow(ctx, files, stop, func(i int, off int64, data []byte) error {
		l := locals[i]
		if off != l.off {
			return fmt.Errorf("follow %s: data at %d, local copy ends at %d", cfg.Files[i], off, l.off)
		}
		if err := l.write(data); err != nil {
			return err
		}
		delivered = true
		if i == 0 {
			if err := lines.write(data); err != nil {
				return fmt.Errorf("follow: write lines: %w", err)
			}
		}
		return nil
	})
	return delivered, err
}

func offsets(locals []*local) []int64 {
	o := make([]int64, len(locals))
	for i, l := range locals {
		o[i] = l.off
	}
	return o
}

// local is the local copy of one followed file, open for appending; off
// is its size, where the next piece must start. It keeps the first write
// error.
type local struct {
	f         *os.File
	off       int64
	syncEvery time.Duration
	synced    time.Time
	dirty     bool
	err       error
}

func openLocal(name string, syncEvery time.Duration) (*local, error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("follow: open %s: %w", name, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("follow: stat %s: %w", name, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("follow: %s is not a regular file", name)
	}
	return &local{f: f, off: st.Size(), syncEvery: syncEvery, synced: time.Now()}, nil
}

// write appends data; the offset advances only past what was written.
func (l *local) write(data []byte) error {
	if l.err != nil {
		return l.err
	}
	n, err := l.f.Write(data)
	l.off += int64(n)
	l.dirty = true
	if err != nil {
		l.err = fmt.Errorf("follow: write %s: %w", l.f.Name(), err)
		return l.err
	}
	if time.Since(l.synced) >= l.syncEvery {
		return l.sync()
	}
	return nil
}

func (l *local) sync() error {
	if l.err != nil || !l.dirty {
		return l.err
	}
	if err := l.f.Sync(); err != nil {
		l.err = fmt.Errorf("follow: sync %s: %w", l.f.Name(), err)
		return l.err
	}
	l.dirty = false
	l.synced = time.Now()
	return nil
}

func (l *local) close() error {
	err := l.sync()
	if cerr := l.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("follow: close %s: %w", l.f.Name(), cerr)
	}
	return err
}

// lineWriter passes bytes on to w a complete line at a time, holding back
// a partial last line (up to maxLine) until its newline or flush. It keeps
// the first error.
type lineWriter struct {
	w       io.Writer
	pending []byte
	err     error
}

func (l *lineWriter) write(p []byte) error {
	if l.w == nil || l.err != nil {
		return l.err
	}
	i := bytes.LastIndexByte(p, '\n')
	if i < 0 {
		l.pending = append(l.pending, p...)
		if len(l.pending) > maxLine {
			return l.flush()
		}
		return nil
	}
	out := p[:i+1]
	if len(l.pending) > 0 {
		l.pending = append(l.pending, out...)
		out = l.pending
	}
	if _, err := l.w.Write(out); err != nil {
		l.err = err
		return err
	}
	l.pending = append(l.pending[:0], p[i+1:]...)
	if cap(l.pending) > maxLine {
		l.pending = append([]byte(nil), l.pending...)
	}
	return nil
}

// flush writes the held-back partial line.
func (l *lineWriter) flush() error {
	if l.w == nil || l.err != nil || len(l.pending) == 0 {
		return l.err
	}
	if _, err := l.w.Write(l.pending); err != nil {
		l.err = err
		return err
	}
	l.pending = l.pending[:0]
	return nil
}
