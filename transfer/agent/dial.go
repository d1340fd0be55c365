package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// ErrUnavailable means the agent cannot run in this sandbox: no build for
// its OS or architecture, a temp directory that is not writable or is
// mounted noexec, or a ferry built without agents. The error says which;
// auto mode falls back to POSIX mode on it.
var ErrUnavailable = errors.New("agent: cannot run in this sandbox")

// DialConfig says how to reach the agent in one sandbox.
type DialConfig struct {
	X       relay.Execer
	Sandbox string
	// Bundle is the agent builds to install from.
	Bundle Bundle
	// MaxBanner bounds the output a login shell may print before the
	// agent's hello; default DefaultMaxSkip.
	MaxBanner int
	Logger    *slog.Logger
	// Memory, when set, remembers the sandboxes where an agent of ours
	// has answered. In those, Dial returns without waiting for the
	// agent's hello: the client's first calls (those a cached agent of
	// another build could take harmlessly) leave with the host's own
	// hello, a round trip sooner. If no agent of ours answers after all,
	// the client installs one, as Dial does, when a call first needs it;
	// should the sandbox no longer run it, ErrUnavailable comes from that
	// call rather than from Dial.
	Memory Memory
}

// Memory remembers, beyond one process, in which sandboxes an agent of
// ferry's has answered, so that the next Dial there need not wait for
// its hello (see DialConfig.Memory). It is a hint: a sandbox that lost its
// agent (its temp directory cleaned, or recreated under its name) costs
// no more than a Dial without it, and one where the agent can no longer
// be installed is forgotten once a call has said so.
type Memory interface {
	Answered(sandbox string) bool
	Remember(sandbox string, answered bool)
}

// NewMemory returns a Memory of one process's own: for a long-lived
// caller (a Launcher) that dials the same sandboxes many times.
func NewMemory() Memory { return &processMemory{answered: map[string]bool{}} }

type processMemory struct {
	mu       sync.Mutex
	answered map[string]bool
}

func (m *processMemory) Answered(sandbox string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.answered[sandbox]
}

func (m *processMemory) Remember(sandbox string, answered bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if answered {
		m.answered[sandbox] = true
	} else {
		delete(m.answered, sandbox)
	}
}

// Dialled reports what a Dial did, for logs and --json.
type Dialled struct {
	// Installed is true when the agent had to be streamed in.
	Installed bool
	// Execs is how many execs the dial took: one when a cached agent
	// answered.
	Execs int
}

// The serve script runs the cached agent for this machine if there is one,
// and otherwise describes the sandbox on one line and exits: one exec in
// the common case. Only a cache directory and binary owned by the
// sandbox's own user are run: in a /tmp shared with other users, another
// user could have made the directory first. $1 and $2 are the cache keys of the amd64 and arm64
// builds ("-" when the host has none); $3 is "serve", or "probe" to
// describe the sandbox even when an agent is cached.
//
// Serving forks nothing: the cache directory is found by a glob, the
// .ferry-<uid> that the sandbox's user owns (a uid is digits: the glob
// passes over the temp dir's other .ferry- names, such as the SSH
// transport's .ferry-exec- files, whose tests cost 3 ms a start with 200
// of them), and the build by its key,
// where only the sandbox's own architecture's was ever installed. The
// `uname` and `id` that name them for the probe line cost three fork
// and execs, 10 ms and more of every command's start. Which build
// answers, the host checks by the digest in its hello.
const serveScript = `if [ "$3" = serve ]; then for d in "${TMPDIR:-/tmp}"/.ferry-[0-9]*; do for h in "$1" "$2"; do ` +
	`if [ "$h" != - ] && [ -O "$d" ] && [ -O "$d/agent-$h" ] && [ -x "$d/agent-$h" ]; then exec "$d/agent-$h" serve; fi; ` +
	`done; done; fi; ` +
	`m=$(uname -m); s=$(uname -s); d="${TMPDIR:-/tmp}/.ferry-$(id -u)"; ` +
	`z=raw; if command -v zstd >/dev/null 2>&1; then z=zstd; elif command -v gzip >/dev/null 2>&1; then z=gzip; fi; ` +
	`printf '\nFERRY-PROBE %s %s %s %s\n' "$s" "$m" "$z" "$d"`

// The install script writes the agent from stdin to a temporary name in the
// cache directory and renames it into place, so that two hosts installing
// at once, or one cut off halfway, never leave a broken agent under the
// name the serve script runs. $1 is the directory, $2 the key, $3 how stdin
// is encoded.
//
// Each ferry release is a new build under a new key, so a sandbox that
// outlives a few upgrades would keep a 9 MB agent for each. Once the new
// build is in place, the script keeps the cacheKeep most recently
// installed builds (this one among them, whatever the others' times say)
// and removes the rest with their kept digests. A host still running an
// older build that was removed installs it again on its next dial; a
// running agent keeps its open binary. Only names of the cache's own form
// are touched: rm removes a link named so, never what it points at. The
// pruning cannot fail the install.
//
// A shell ends on a signal without running its EXIT trap, so that an
// install stopped by ferry (TERM, after a cut relay) or hung up would
// leave its temporary file, up to the whole binary: the signals exit the
// script instead, and the EXIT trap removes the file. One killed outright
// still leaves it; the next install, before its own, removes the
// temporary files of installs whose process is gone (the PID their name
// ends in), so that one cut off too does its part.
const installScript = `set -e; umask 077; mkdir -p "$1"; ` +
	`if [ ! -O "$1" ]; then echo "$1 belongs to another user" >&2; exit 1; fi; chmod 0700 "$1"; ` +
	`{ for f in "$1"/.agent-*.*; do p=${f##*.}; case $p in ''|*[!0-9]*) continue;; esac; kill -0 "$p" 2>/dev/null || rm -f "$f"; done; } 2>/dev/null || true; ` +
	`t="$1/.agent-$2.$$"; trap 'rm -f "$t"' EXIT; trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM; ` +
	`case "$3" in zstd) zstd -dcq >"$t";; gzip) gzip -dc >"$t";; *) cat >"$t";; esac; ` +
	`chmod 0700 "$t"; mv -f "$t" "$1/agent-$2"; trap - EXIT; ` +
	`ls -t "$1" 2>/dev/null | { n=1; while IFS= read -r f; do case $f in "agent-$2"|agent-*[!0-9a-f]*) ;; agent-?*) n=$((n+1)); ` +
	`[ $n -le ` + cacheKeep + ` ] || rm -f "$1/$f" "$1/.$f.digest";; esac; done; } || true`

// cacheKeep is how many agent builds a sandbox's cache keeps (see
// installScript).
const cacheKeep = "4"

// Dial starts the agent in the sandbox, installing it first when it is
// missing or is not a build the host carries, and returns a client
// talking to it through one exec. The exec lives until Close.
func Dial(ctx context.Context, cfg DialConfig) (*Client, Dialled, error) {
	var d Dialled
	if len(cfg.Bundle) == 0 {
		return nil, d, fmt.Errorf("%w: this ferry carries no agent builds (build it with `make build`)", ErrUnavailable)
	}
	if cfg.Memory != nil && cfg.Memory.Answered(cfg.Sandbox) {
		c, err := serveEarly(ctx, cfg)
		d.Execs++
		return c, d, err
	}
	c, pr, err := serve(ctx, cfg, false)
	d.Execs++
	c, err = settleDial(ctx, cfg, &d, c, pr, err)
	if err == nil && cfg.Memory != nil {
		cfg.Memory.Remember(cfg.Sandbox, true)
	}
	return c, d, err
}

// settleDial takes the outcome of a serve exec (c, or the probe line pr,
// or why neither) to a client of an agent of ours: c itself when it is
// one; otherwise, when the sandbox can run ours, a new one, installed.
func settleDial(ctx context.Context, cfg DialConfig, d *Dialled, c *Client, pr probeResult, err error) (*Client, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var (
		verr    *VersionError
		notOurs *errNotOurs
	)
	switch {
	case err == nil && ours(cfg.Bundle, c.Hello):
		return c, nil
	case err == nil:
		// A stale agent under our key (a copy that is not what we
		// installed): replace it.
		log.Info("cached agent is not ours; reinstalling", "sandbox", cfg.Sandbox, "agent", c.Hello.String())
		c.Close()
	case errors.As(err, &notOurs):
		log.Info("cached agent is not ours; reinstalling", "sandbox", cfg.Sandbox, "agent", notOurs.h.String())
	case errors.As(err, &verr):
		log.Info("cached agent speaks another protocol; reinstalling", "sandbox", cfg.Sandbox, "err", err)
	case errors.Is(err, errNoAgent):
	default:
		return nil, err
	}
	if !errors.Is(err, errNoAgent) {
		// The stale agent answered instead of the probe: ask again.
		if _, pr, err = serve(ctx, cfg, true); !errors.Is(err, errNoAgent) {
			return nil, fmt.Errorf("probe %s: %w", cfg.Sandbox, err)
		}
		d.Execs++
	}
	bin, ok := cfg.Bundle[pr.arch]
	if !ok {
		return nil, fmt.Errorf("%w: no agent build for %s %s", ErrUnavailable, pr.os, pr.machine)
	}
	start := time.Now()
	n, err := install(ctx, cfg, pr, bin)
	d.Execs++
	if err != nil {
		return nil, err
	}
	d.Installed = true
	log.Info("agent installed", "sandbox", cfg.Sandbox, "arch", bin.Arch, "encoding", pr.decoder, "wire_bytes", n, "seconds", time.Since(start).Seconds())
	c, _, err = serve(ctx, cfg, false)
	d.Execs++
	if err != nil {
		return nil, fmt.Errorf("start agent in %s after installing it: %w", cfg.Sandbox, err)
	}
	if c.Hello.Digest != bin.Digest {
		c.Close()
		return nil, fmt.Errorf("agent in %s: runs %s after a reinstall, want sha256:%x", cfg.Sandbox, c.Hello, bin.Digest[:6])
	}
	return c, nil
}

// exitWait bounds how long closing a connection waits for the agent to
// exit once its stdin has ended, before the exec is cancelled (which
// kills it, and reads as a failed exit). It outlasts the agent's own
// wire.StopWait, so that an agent still finishing a call's cleanup exits by
// itself rather than being killed at the same moment it would have.
const exitWait = wire.StopWait + 3*time.Second

// errNoAgent: the serve script found no cached agent and printed its
// probe line instead.
var errNoAgent = fmt.Errorf("%w: no cached agent", ErrUnavailable)

// ours reports whether h is the hello of a build in b.
func ours(b Bundle, h Hello) bool {
	for _, bin := range b {
		if bin.Digest == h.Digest {
			return true
		}
	}
	return false
}

// probeResult is what the serve script said when it ran no agent.
type probeResult struct {
	os, machine, arch, decoder, dir string
}

// keys are the serve script's arguments: each build's cache key.
func keys(b Bundle) []string {
	k := []string{"-", "-"}
	for i, arch := range []string{"amd64", "arm64"} {
		if bin, ok := b[arch]; ok {
			k[i] = bin.key()
		}
	}
	return k
}

// serveExec is one run of the serve script: the host's ends of its
// streams, and how to end it.
type serveExec struct {
	cfg     DialConfig
	stdinW  *io.PipeWriter
	stdoutR *io.PipeReader
	stderr  *tailBuffer
	head    *headBuffer
	x       *execution
	cancel  context.CancelFunc
	// settled, once set, says whether every call on the connection has
	// been answered (Client.settled): teardown need not wait for the
	// agent's exit then.
	settled func() bool
}

// startServe starts the serve script; what is "serve" or "probe".
func startServe(ctx context.Context, cfg DialConfig, what string) *serveExec {
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	s := &serveExec{
		cfg: cfg, stdinW: stdinW, stdoutR: stdoutR,
		stderr: &tailBuffer{max: 8 << 10},
		head:   &headBuffer{max: 64 << 10},
		x:      &execution{done: make(chan struct{})},
	}
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	go func() {
		code, err := cfg.X.Exec(ectx, &relay.Command{
			Sandbox: cfg.Sandbox,
			Argv:    append(append([]string{"sh", "-c", serveScript, "sh"}, keys(cfg.Bundle)...), what),
			Stdin:   stdinR,
			Stdout:  stdoutW,
			Stderr:  s.stderr,
			// The agent exits at its stdin's EOF: teardown's cancel
			// needs no stop after it.
			EndsAtEOF: true,
		})
		s.x.finish(code, err, s.stderr)
		// Record first, then wake the readers: an RPC that fails because
		// the stream ended finds the reason.
		stdoutW.CloseWithError(s.x.err())
		stdinR.CloseWithError(io.ErrClosedPipe)
	}()
	return s
}

// out is the agent's stdout, its banner and hello recorded in head.
func (s *serveExec) out() io.Reader {
	tee := io.TeeReader(s.stdoutR, s.head)
	return readerFunc(func(p []byte) (int, error) {
		if s.head.full() {
			return s.stdoutR.Read(p)
		}
		return tee.Read(p)
	})
}

func (s *serveExec) maxSkip() int {
	if s.cfg.MaxBanner > 0 {
		return s.cfg.MaxBanner
	}
	return DefaultMaxSkip
}

// teardown ends the exec: EOF on the agent's stdin lets it exit
// cleanly; one that does not is cancelled. An agent that has answered
// every call has nothing left to clean up, and its exit would only
// cost a round trip: its exec is cancelled at once. (A gateway ends a
// cancelled exec's stdin too: OpenShell's sends the command EOF.)
func (s *serveExec) teardown() error {
	s.stdinW.Close()
	if s.settled != nil && s.settled() {
		select {
		case <-s.x.done:
			return s.x.closeErr()
		default:
		}
		s.cancel()
		// Nothing more is read: a relay still delivering the
		// agent's last bytes (its GOAWAY) must not block on them.
		s.stdoutR.CloseWithError(io.ErrClosedPipe)
		<-s.x.done
		if err := s.x.closeErr(); errors.Is(err, relay.ErrRelayLost) {
			// Lost before the cancel: the caller may want to know
			// the sandbox is out of reach.
			return err
		}
		return nil
	}
	// What the agent writes while it shuts down (a GOAWAY) must be
	// read, or its exit waits on a full pipe; gRPC's reader may be
	// gone already.
	drained := make(chan struct{})
	go func() {
		io.Copy(io.Discard, s.stdoutR)
		close(drained)
	}()
	defer func() { <-drained }()
	select {
	case <-s.x.done:
	case <-time.After(exitWait):
		s.cancel()
		<-s.x.done
	}
	s.cancel()
	s.stdoutR.CloseWithError(io.ErrClosedPipe)
	return s.x.closeErr()
}

// failed is why no agent of our protocol answered, once the exec has
// been torn down: the script's probe line (errNoAgent), or why the agent
// did not start.
func (s *serveExec) failed() (probeResult, error) {
	var pr probeResult
	for _, line := range strings.Split(s.head.String(), "\n") {
		f := strings.Fields(line)
		if len(f) == 5 && f[0] == "FERRY-PROBE" {
			pr = probeResult{os: f[1], machine: f[2], decoder: f[3], dir: f[4]}
			if f[1] == "Linux" {
				pr.arch = archOf(f[2])
			}
			return pr, errNoAgent
		}
	}
	return pr, fmt.Errorf("%w: the agent did not start in %s: %v", ErrUnavailable, s.cfg.Sandbox, s.x.exitDesc())
}

// serve runs the serve script. It returns a client when an agent answered
// with a hello of our version; otherwise the probe line, if the script
// printed one, and an error.
func serve(ctx context.Context, cfg DialConfig, probeOnly bool) (*Client, probeResult, error) {
	what := "serve"
	if probeOnly {
		what = "probe"
	}
	s := startServe(ctx, cfg, what)
	c, cancelled, err := connect(ctx, s, func() (*Client, error) {
		return NewClient(s.out(), s.stdinW, s.maxSkip(), s.teardown)
	}, func(c *Client) { c.Close() })
	if cancelled {
		return nil, probeResult{}, err
	}
	if err == nil {
		l := c.cur
		s.settled, l.err = l.calls.settled, s.x.err
		s.head.stop()
		return c, probeResult{}, nil
	}
	var verr *VersionError
	if errors.As(err, &verr) {
		c.Close()
		return nil, probeResult{}, err
	}
	s.teardown()
	pr, err := s.failed()
	return nil, pr, err
}

// connect runs f, which opens the agent connection on s's streams, and
// returns what it made. f blocks on the exec (a hello to read, or to
// write); a ctx that ends first cancels the exec, which ends f, and what
// f made is closed with drop (the exec torn down when it made nothing):
// connect then returns the zero T, cancelled, and ctx's error.
func connect[T comparable](ctx context.Context, s *serveExec, f func() (T, error), drop func(T)) (v T, cancelled bool, err error) {
	type result struct {
		v   T
		err error
	}
	got := make(chan result, 1)
	go func() {
		v, err := f()
		got <- result{v, err}
	}()
	select {
	case r := <-got:
		return r.v, false, r.err
	case <-ctx.Done():
		s.cancel()
		var zero T
		if r := <-got; r.v != zero {
			drop(r.v)
		} else {
			s.teardown()
		}
		return zero, true, ctx.Err()
	}
}

// errNotOurs is an early connection's refusal of an agent that is not
// a build of ours (see ours).
type errNotOurs struct{ h Hello }

func (e *errNotOurs) Error() string { return "agent: not a build of this ferry: " + e.h.String() }

// serveEarly runs the serve script and returns a client whose calls go
// at once, before the agent's hello (DialConfig.Memory). When the hello
// turns out not to be our agent's, the client's redial takes it from
// there as Dial would have (settleDial), with what the exec printed.
func serveEarly(ctx context.Context, cfg DialConfig) (*Client, error) {
	s := startServe(ctx, cfg, "serve")
	calls := &calls{}
	s.settled = calls.settled
	// The host's hello names the build it expects; the agent does not
	// check it (Serve reads the version only). With builds for two
	// architectures and the sandbox's not known yet, it is either.
	var want Binary
	for _, arch := range []string{"amd64", "arm64"} {
		if b, ok := cfg.Bundle[arch]; ok {
			want = b
			break
		}
	}
	check := func(h Hello) error {
		if !ours(cfg.Bundle, h) {
			return &errNotOurs{h}
		}
		return nil
	}
	e, cancelled, err := connect(ctx, s, func() (*wire.Early, error) {
		return wire.ConnectEarly(s.out(), s.stdinW, s.maxSkip(), s.teardown, want.Digest, check, grpc.WithStatsHandler(calls))
	}, func(e *wire.Early) {
		e.CC.Close()
		e.Conn.Close()
	})
	if cancelled {
		return nil, err
	}
	if err != nil {
		s.teardown()
		return nil, fmt.Errorf("start agent in %s: %w", cfg.Sandbox, err)
	}
	l := &link{hello: Hello{Version: wire.ProtocolVersion, Digest: want.Digest}, cc: e.CC, conn: e.Conn, calls: calls, err: s.x.err, early: e}
	go func() {
		// The banner and hello are recorded until the hello is in.
		if _, err := e.Hello(); err == nil {
			s.head.stop()
		}
	}()
	c := newClient(l)
	c.redial = func(ctx context.Context, why error) (*link, error) {
		var (
			pr      probeResult
			err     = why
			d       Dialled
			notOurs *errNotOurs
			verr    *VersionError
		)
		switch {
		case errors.Is(why, wire.ErrNotHeard):
			return nil, why
		case errors.As(why, &notOurs), errors.As(why, &verr):
			// A stale agent: settleDial asks again, then installs.
		default:
			// No hello: the exec has been torn down, and its output
			// says why (the probe line, most often).
			pr, err = s.failed()
		}
		nc, err := settleDial(ctx, cfg, &d, nil, pr, err)
		if errors.Is(err, ErrUnavailable) && cfg.Memory != nil {
			// The next Dial here finds out at once, and auto mode falls
			// back to POSIX mode then.
			cfg.Memory.Remember(cfg.Sandbox, false)
		}
		if err != nil {
			return nil, err
		}
		return nc.cur, nil
	}
	return c, nil
}

// install streams the agent build into the sandbox's cache, encoded for
// what the sandbox can decode.
func install(ctx context.Context, cfg DialConfig, pr probeResult, bin Binary) (int64, error) {
	z, err := bin.zstd()
	if err != nil {
		return 0, fmt.Errorf("agent build %s: %w", bin.Arch, err)
	}
	var payload []byte
	switch pr.decoder {
	case "zstd":
		payload = z
	default:
		raw, err := decodeZstd(z)
		if err != nil {
			return 0, fmt.Errorf("agent build %s: %w", bin.Arch, err)
		}
		payload = raw
		if pr.decoder == "gzip" {
			var b bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
			zw.Write(raw)
			zw.Close()
			payload = b.Bytes()
		}
	}
	dir := pr.dir
	stderr := &tailBuffer{max: 8 << 10}
	code, err := cfg.X.Exec(ctx, &relay.Command{
		Sandbox: cfg.Sandbox,
		Argv:    []string{"sh", "-c", installScript, "sh", dir, bin.key(), pr.decoder},
		Stdin:   bytes.NewReader(payload),
		Stdout:  io.Discard,
		Stderr:  stderr,
	})
	if err != nil {
		return 0, fmt.Errorf("install agent in %s: %w", cfg.Sandbox, err)
	}
	if code != 0 {
		return 0, fmt.Errorf("%w: install into %s failed: exit %d%s", ErrUnavailable, dir, code, stderrSuffix(stderr))
	}
	return int64(len(payload)), nil
}

func decodeZstd(z []byte) ([]byte, error) {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(256<<20))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.DecodeAll(z, nil)
}

// ErrExited means the agent's process ended under the host: it crashed,
// was killed (out of memory, by the sandbox), or exited non-zero when
// closed. Whatever it was writing is left for the host to clean up.
var ErrExited = errors.New("agent: exited")

// ExitedError is how an agent's process ended: its exit status and the
// end of what it wrote to stderr. It matches ErrExited.
type ExitedError struct {
	Code   int
	Stderr string
}

func (e *ExitedError) Error() string {
	s := fmt.Sprintf("agent exited: exit %d", e.Code)
	if e.Stderr != "" {
		s += ": " + e.Stderr
	}
	return s
}

func (e *ExitedError) Is(target error) bool { return target == ErrExited }

// execution is how the agent's exec ended.
type execution struct {
	mu     sync.Mutex
	done   chan struct{}
	ended  bool
	code   int
	xerr   error
	stderr string
}

func (x *execution) finish(code int, err error, stderr *tailBuffer) {
	x.mu.Lock()
	x.ended, x.code, x.xerr, x.stderr = true, code, err, strings.TrimSpace(stderr.String())
	x.mu.Unlock()
	close(x.done)
}

// err is why the stream ended, while the client was in use: a lost relay,
// or an agent that exited (crashed, killed) before the host closed it.
func (x *execution) err() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case !x.ended:
		return nil
	case x.xerr != nil:
		return x.xerr
	default:
		return &ExitedError{Code: x.code, Stderr: clip(x.stderr)}
	}
}

// closeErr is the exec's outcome after the host closed the agent's stdin:
// exit 0 is clean.
func (x *execution) closeErr() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.xerr != nil {
		return x.xerr
	}
	if x.code != 0 {
		return &ExitedError{Code: x.code, Stderr: clip(x.stderr)}
	}
	return nil
}

func (x *execution) exitDesc() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.xerr != nil {
		return x.xerr.Error()
	}
	return x.desc()
}

func (x *execution) desc() string {
	s := fmt.Sprintf("exit %d", x.code)
	if x.stderr != "" {
		s += ": " + clip(x.stderr)
	}
	return s
}

func stderrSuffix(t *tailBuffer) string {
	if s := strings.TrimSpace(t.String()); s != "" {
		return ": " + clip(s)
	}
	return ""
}

func clip(s string) string {
	if len(s) > 300 {
		s = "..." + s[len(s)-300:]
	}
	return strings.ReplaceAll(s, "\n", "; ")
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// headBuffer keeps the first max bytes written, until stopped.
type headBuffer struct {
	mu      sync.Mutex
	b       []byte
	max     int
	stopped bool
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped {
		if room := h.max - len(h.b); room > 0 {
			h.b = append(h.b, p[:min(len(p), room)]...)
		}
	}
	return len(p), nil
}

func (h *headBuffer) full() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopped || len(h.b) >= h.max
}

func (h *headBuffer) stop() {
	h.mu.Lock()
	h.stopped, h.b = true, nil
	h.mu.Unlock()
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.b)
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
