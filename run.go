package ferry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/treediff"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// Mapping is one LOCAL:REMOTE pair.
type Mapping struct {
	Local, Remote string
}

// RunSpec is one Option-B run: inputs in, one command, artifacts out.
type RunSpec struct {
	// Inputs are uploaded before the command, with Upload's semantics.
	Inputs []Mapping
	// Secrets are uploaded like inputs, through the exec stream's stdin
	// only, then made 0600 in a 0700 directory. They never appear in an
	// argv, an environment or a log line.
	Secrets []Mapping
	Argv    []string
	Env     map[string]string
	Workdir string
	Timeout time.Duration
	// Out is the local run directory: artifacts land there, and the
	// command's output is appended to Out/runner.log.
	Out string
	// MetaDir is the sandbox directory the artifacts are pulled from.
	// Default DefaultMetaDir.
	MetaDir string
	// Stdout and Stderr show the command's output live (nil: not shown).
	Stdout, Stderr io.Writer
	// Lines, when set, shows the agent's agent.ndjson live, a line at a
	// time, as Follow does (agent mode only); after the command, the lines
	// the follow had not shown yet are shown from the pulled copy, so each
	// line is shown once.
	Lines io.Writer
	// PullTimeout bounds the artifact pull after the command, which runs
	// even when ctx was cancelled. Default 2 minutes.
	PullTimeout time.Duration
	Limits      archive.Limits
	// Sessions are restored from Store before the command (a key without
	// a snapshot yet is a task's first run) and saved after it, also
	// after a failure, a timeout or a cancelled ctx.
	Sessions []SessionMapping
	Store    *session.Store
	// Logs is the gateway log the run's OCSF events are read from after
	// the command, into Out/ocsf.ndjson (see WriteEvents); nil (a direct
	// SSH channel) makes them unavailable, never "none".
	Logs LogSource
	// Diff are sandbox directories listed before the command and after
	// it (see Manifest), their diffs written to Out/workspace-diff.json,
	// limited to DiffFilter's paths; DiffContent, when positive, adds
	// unified diffs of text files of up to that many bytes, whose
	// before content is read before the command.
	Diff        []string
	DiffFilter  treediff.Filter
	DiffContent int64

	diffs *runDiffs // the before manifests, from Run's phase to phase
}

// SessionMapping is one KEY:REMOTE pair of `ferry run --session`.
type SessionMapping struct {
	Key, Remote string
}

// RunSession is what a run did with one session.
type RunSession struct {
	Key      string                 `json:"key"`
	Restored *session.RestoreResult `json:"restored,omitempty"`
	Saved    *session.SaveResult    `json:"saved,omitempty"`
	Error    string                 `json:"error,omitempty"`
}

// RunResult is what a run did.
type RunResult struct {
	ExitCode int          `json:"exit_code"`
	Pull     PullResult   `json:"pull"`
	PullErr  error        `json:"-"`
	Sessions []RunSession `json:"sessions,omitempty"`
	// SessionErr is the first failed session save after the command.
	SessionErr error `json:"-"`
	// Events are the sandbox's OCSF events since the run started, or
	// why they are unavailable.
	Events *EventsResult `json:"events,omitempty"`
	// Diff is each --diff directory's summary; DiffErr the first that
	// failed after the command.
	Diff    []RunDiff `json:"diff,omitempty"`
	DiffErr error     `json:"-"`
}

// Run uploads spec's inputs and secrets, runs the command, and pulls the
// artifacts into spec.Out, also after a failure, a timeout or a cancelled
// ctx, so that meta.json reaches the host however the command ended. The
// error is the first failure of the run itself; a failed pull after a
// finished command is reported in RunResult.PullErr (ErrNoMeta included).
// A channel lost after the pull and the session saves had succeeded is no
// failure of either: Pull.RelayLost and each saved session's RelayLost
// say so.
func Run(ctx context.Context, sb Sandbox, spec RunSpec) (RunResult, error) {
	var res RunResult
	if spec.Out == "" {
		return res, errors.New("run: no output directory")
	}
	if spec.PullTimeout == 0 {
		spec.PullTimeout = 2 * time.Minute
	}
	if err := os.MkdirAll(spec.Out, 0o755); err != nil {
		return res, fmt.Errorf("create %s: %w", spec.Out, err)
	}
	if len(spec.Sessions) > 0 && spec.Store == nil {
		return res, errors.New("run: sessions without a store")
	}
	start := time.Now()
	// The log is followed from the start, so that no event of a long run
	// falls out of the tail the gateway keeps before it is read; the
	// follow outlives a cancelled ctx, as the pull does.
	follow := followEvents(context.WithoutCancel(ctx), spec.Logs, sb.Name, start.Add(-EventsSkew))
	defer follow.stop()
	if len(spec.Diff) > 0 {
		spec.diffs = &runDiffs{}
	}
	// The pre-exec phase: inputs, secrets and sessions; in agent mode one
	// exec carries it all, and is kept for the post-exec phase.
	h := &idleHandoff{}
	var kept transfer.Remote
	var err error
	res.Sessions, kept, err = prepareIdle(ctx, sb, spec, h)
	defer func() {
		if kept != nil {
			kept.Close()
		}
	}()
	if err != nil {
		// A run that failed before its command still says what the
		// sandbox saw of it (an upload refused by a policy, say).
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), spec.PullTimeout)
		defer cancel()
		ev := writeEvents(ectx, spec.Logs, sb.Name, spec.Out, start.Add(-EventsSkew), follow)
		res.Events = &ev
		return res, err
	}
	var finish func() int64
	if spec.Lines != nil && kept != nil {
		if finish, err = followRun(ctx, sb, spec); err != nil {
			return res, err
		}
	}

	// The live output goes to a side file first: the pull below replaces
	// runner.log with the sandbox's, and the live output is appended after.
	live, err := os.CreateTemp(spec.Out, ".runner.log.live-")
	if err != nil {
		return res, fmt.Errorf("create log: %w", err)
	}
	defer os.Remove(live.Name())
	defer live.Close()
	stdout, stderr := io.Writer(live), io.Writer(live)
	if spec.Stdout != nil {
		stdout = io.MultiWriter(spec.Stdout, live)
	}
	if spec.Stderr != nil {
		stderr = io.MultiWriter(spec.Stderr, live)
	}
	code, execErr := sb.X.Exec(ctx, &relay.Command{
		Sandbox: sb.Name,
		Argv:    spec.Argv,
		Env:     spec.Env,
		Workdir: spec.Workdir,
		Timeout: spec.Timeout,
		Stdout:  stdout,
		Stderr:  stderr,
	})
	res.ExitCode = code
	var printed int64 = -1
	if finish != nil {
		printed = finish()
	}

	// Pull whatever happened: Rascal reads meta.json even from a failed
	// run. A cancelled ctx must not stop it, so it gets its own deadline.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), spec.PullTimeout)
	defer cancel()
	// The events are read while the artifacts come: the command has
	// ended, and what it did is in the log by now.
	evc := make(chan EventsResult, 1)
	go func() { evc <- writeEvents(pctx, spec.Logs, sb.Name, spec.Out, start.Add(-EventsSkew), follow) }()
	res.Pull, res.PullErr, res.SessionErr = finishRun(pctx, sb, spec, res.Sessions, kept, h)
	kept = nil // finishRun closed it
	ev := <-evc
	res.Events = &ev
	res.Diff, res.DiffErr = spec.diffs.result()
	if printed >= 0 && (res.PullErr == nil || errors.Is(res.PullErr, ErrNoMeta)) {
		showRest(filepath.Join(spec.Out, Followed[0]), printed, spec.Lines)
	}
	if err := appendFile(filepath.Join(spec.Out, "runner.log"), live); err != nil && execErr == nil {
		execErr = err
	}
	if execErr != nil {
		return res, fmt.Errorf("run %s in %s: %w", spec.Argv[0], sb.Name, execErr)
	}
	return res, nil
}

// prepareIdle is the pre-exec phase through one connection, under sb's
// idle timeout (not the command's: that may be silent for long). In agent
// mode it returns the connection open, for the post-exec phase, which
// then needs no new exec and no new handshake; its exec goes through h,
// which is detached from the phase's watch when it returns, so that no
// watch sees the connection while the command runs. A POSIX-mode
// connection is no exec and is closed (nil).
func prepareIdle(ctx context.Context, sb Sandbox, spec RunSpec, h *idleHandoff) (_ []RunSession, kept transfer.Remote, err error) {
	ctx, sb, idle := sb.watchIdleVia(ctx, "run: inputs to "+sb.Name, h)
	defer func() { err = idle.end(err) }()
	defer h.detach()
	r, err := sb.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	sessions, err := prepareRun(ctx, sb, r, spec)
	if sb.agentGone(r, err) {
		// Nothing reached the sandbox: the phase runs again whole.
		r.Close()
		if r, err = sb.open(ctx); err != nil {
			return nil, nil, err
		}
		sessions, err = prepareRun(ctx, sb, r, spec)
	}
	if r.Agent() != nil {
		kept = r
	}
	if err != nil {
		if kept == nil {
			r.Close()
		}
		return sessions, kept, err
	}
	if kept == nil {
		if err := r.Close(); err != nil {
			return sessions, nil, fmt.Errorf("run: inputs to %s: %w", sb.Name, err)
		}
	}
	return sessions, kept, nil
}

// followRun follows the run's growing artifacts into a private directory
// while the command runs, showing agent.ndjson's lines. finish ends the
// follow and returns how many bytes of agent.ndjson it showed.
func followRun(ctx context.Context, sb Sandbox, spec RunSpec) (finish func() int64, err error) {
	dir, err := os.MkdirTemp(spec.Out, ".ferry-follow-")
	if err != nil {
		return nil, fmt.Errorf("run: follow: %w", err)
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Follow(fctx, sb, FollowSpec{MetaDir: spec.MetaDir, Out: dir, Lines: spec.Lines})
	}()
	return func() int64 {
		cancel()
		if err := <-done; err != nil && sb.Logger != nil {
			sb.Logger.Warn("live follow ended early", "sandbox", sb.Name, "err", err)
		}
		defer os.RemoveAll(dir)
		fi, err := os.Stat(filepath.Join(dir, Followed[0]))
		if err != nil {
			return 0
		}
		return fi.Size()
	}, nil
}

// showRest writes what follows the first n bytes of the file.
func showRest(name string, n int64, w io.Writer) {
	f, err := os.Open(name)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(n, io.SeekStart); err == nil {
		io.Copy(w, f)
	}
}

// prepareRun is the pre-exec phase of a run through r: inputs, secrets,
// then the sessions, each restored from the store (a key without a
// snapshot yet is a task's first run, and restores nothing).
func prepareRun(ctx context.Context, sb Sandbox, r transfer.Remote, spec RunSpec) ([]RunSession, error) {
	if err := prepare(ctx, sb, r, spec); err != nil {
		return nil, err
	}
	var sessions []RunSession
	for _, m := range spec.Sessions {
		rr, err := spec.Store.RestoreTo(ctx, r, session.RestoreSpec{Key: m.Key, Dir: m.Remote, AllowMissing: true, Replace: true})
		if err != nil {
			return sessions, fmt.Errorf("run: %w", err)
		}
		sessions = append(sessions, RunSession{Key: m.Key, Restored: &rr})
	}
	return sessions, spec.diffs.takeBefore(ctx, r, spec)
}

// finishRun is the post-exec phase: the artifacts, then the sessions,
// through one connection: kept, the pre-exec phase's agent connection,
// when it still stands, else a new one (one exec in agent mode); kept's
// exec goes through h, attached to this phase's idle watch. finishRun
// closes kept. It fills in sessions' results and returns the pull, its
// error, and the first failed session save. A channel that fails once
// the pull and the saves are done fails neither: it is reported in the
// pull's and each saved session's RelayLost.
func finishRun(ctx context.Context, sb Sandbox, spec RunSpec, sessions []RunSession, kept transfer.Remote, h *idleHandoff) (pres PullResult, pullErr, sessionErr error) {
	ctx, sb, idle := sb.watchIdleVia(ctx, "run: artifacts and sessions from "+sb.Name, h)
	defer func() { pullErr, sessionErr = idle.end(pullErr), idle.end(sessionErr) }()
	defer h.detach()
	if kept != nil && lost(kept) {
		// The relay dropped or the agent died while the command ran.
		sb.log().Info("the agent connection kept from before the command was lost while it ran; connecting again", "sandbox", sb.Name, "err", kept.Close())
		kept = nil
	}
	var redial func(context.Context) (transfer.Remote, error)
	r := kept
	if r == nil {
		var err error
		if r, err = sb.open(ctx); err != nil {
			return PullResult{}, err, err
		}
	} else {
		// A loss not seen yet shows in the first call: the pull, which
		// reads only, is tried again through a new connection.
		redial = func(ctx context.Context) (transfer.Remote, error) {
			sb.log().Info("the agent connection kept from before the command was lost at its first call; connecting again", "sandbox", sb.Name)
			return sb.open(ctx)
		}
	}
	return finishThrough(ctx, sb, r, spec, sessions, idle, redial)
}

// lost reports whether r's agent connection has ended under it.
func lost(r transfer.Remote) bool {
	return r.Agent() != nil && r.Agent().Lost()
}

// finishThrough is finishRun through an open transfer.Remote, which it closes;
// idle, when not nil, is held while a save waits for a prune. redial,
// when not nil, replaces r when the pull fails because r was lost.
func finishThrough(ctx context.Context, sb Sandbox, r transfer.Remote, spec RunSpec, sessions []RunSession, idle *idleWatch, redial func(context.Context) (transfer.Remote, error)) (pres PullResult, pullErr, sessionErr error) {
	defer func() { r.Close() }()
	start := time.Now()
	pspec := PullSpec{MetaDir: spec.MetaDir, Out: spec.Out, Limits: spec.Limits}
	pres, pullErr = pull(ctx, sb, r, pspec)
	// A connection lost because the pull's context ended (the idle
	// watch ends the agent's exec with it) is not tried again.
	if pullErr != nil && redial != nil && ctx.Err() == nil && lost(r) {
		r.Close()
		nr, err := redial(ctx)
		if err != nil {
			return PullResult{}, err, err
		}
		r = nr
		pres, pullErr = pull(ctx, sb, r, pspec)
	}
	pres.Seconds = time.Since(start).Seconds()
	// A save may wait, with the channel quiet, for a prune of the store to
	// finish (session's locks): that is the host waiting, not a stalled
	// sandbox, and ending the save for it would lose the session.
	ctx = idle.withHold(ctx)
	// The session is saved however the command ended: the next run of the
	// task resumes from it.
	for i, m := range spec.Sessions {
		sr, err := spec.Store.SaveFrom(ctx, r, session.SaveSpec{Dir: m.Remote, Key: m.Key})
		if err != nil {
			sessions[i].Error = err.Error()
			if sessionErr == nil {
				sessionErr = err
			}
			continue
		}
		sessions[i].Saved = &sr
	}
	spec.diffs.takeAfter(ctx, r, spec)
	if err := r.Close(); err != nil {
		// The channel failed after the work: what succeeded above is
		// complete (the artifacts are in place, each saved snapshot is
		// committed) and is reported so, with the failure beside it.
		// Failing them would send a caller to retry, and a retried save
		// stores the same tree again as a new snapshot.
		if pullErr == nil || errors.Is(pullErr, ErrNoMeta) {
			pres.RelayLost = err.Error()
		}
		for i := range sessions {
			if sessions[i].Saved != nil {
				sessions[i].Saved.RelayLost = err.Error()
			}
		}
	}
	return pres, pullErr, sessionErr
}

// prepare uploads a run's inputs and secrets through r: in agent mode as
// one batch (transfer.UploadSteps), whose stats are one call and whose
// Puts share streams or run at once.
func prepare(ctx context.Context, sb Sandbox, r transfer.Remote, spec RunSpec) error {
	var steps []transfer.Step
	var names []string // of each step's input or secret, for errors
	for _, in := range spec.Inputs {
		st, err := transfer.UploadStep(sb.Name, []string{in.Local}, in.Remote)
		if err != nil {
			return fmt.Errorf("input %s: %w", in.Local, err)
		}
		steps, names = append(steps, st), append(names, "input "+in.Local)
	}
	agentMode := r.Agent() != nil
	if agentMode {
		for _, s := range spec.Secrets {
			st, cleanup, err := secretStep(sb, s)
			if err != nil {
				// The error names paths only, never content.
				return fmt.Errorf("secret %s: %w", s.Local, err)
			}
			defer cleanup()
			steps, names = append(steps, st), append(names, "secret "+s.Local)
		}
	}
	if _, err := transfer.UploadSteps(ctx, r, steps); err != nil {
		var se *transfer.StepError
		if !errors.As(err, &se) {
			return err
		}
		var at []string
		for _, i := range se.Steps {
			at = append(at, names[i])
		}
		return fmt.Errorf("%s: %w", strings.Join(at, ", "), se.Err)
	}
	if agentMode {
		return nil
	}
	for _, s := range spec.Secrets {
		if err := uploadSecret(ctx, sb, r, s); err != nil {
			// The error names paths only, never content.
			return fmt.Errorf("secret %s: %w", s.Local, err)
		}
	}
	return nil
}

func appendFile(dst string, src *os.File) error {
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("rewind log: %w", err)
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", dst, err)
	}
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return fmt.Errorf("append to %s: %w", dst, err)
	}
	return f.Close()
}

// uploadSecret uploads one secret file in POSIX mode and then tightens
// its modes. The content travels only in the tar stream on stdin; the
// follow-up chmod names paths, nothing else.
func uploadSecret(ctx context.Context, sb Sandbox, r transfer.Remote, m Mapping) error {
	if err := checkSecret(m); err != nil {
		return err
	}
	dir := path.Dir(m.Remote)
	if err := shell(ctx, sb, `mkdir -p -- "$1" && chmod 700 -- "$1"`, dir); err != nil {
		return fmt.Errorf("prepare %s:%s: %w", sb.Name, dir, err)
	}
	if _, err := transfer.Upload(ctx, r, []string{m.Local}, m.Remote); err != nil {
		return err
	}
	if err := shell(ctx, sb, `chmod 600 -- "$1"`, m.Remote); err != nil {
		return fmt.Errorf("chmod %s:%s: %w", sb.Name, m.Remote, err)
	}
	return nil
}

func checkSecret(m Mapping) error {
	fi, err := os.Stat(m.Local)
	if err != nil {
		return fmt.Errorf("stat: %w", transfer.ErrNoSource)
	}
	if !fi.Mode().IsRegular() {
		return errors.New("a secret must be a regular file")
	}
	return nil
}

// secretStep is the agent-mode upload of a secret, which gets its modes
// before it leaves the host: a private copy, 0600 in a 0700 directory,
// is what the agent extracts, so no second call is needed and the file
// is never readable by others, not even for a moment. cleanup removes
// the copy once the step has run.
func secretStep(sb Sandbox, m Mapping) (_ transfer.Step, cleanup func(), err error) {
	if err := checkSecret(m); err != nil {
		return transfer.Step{}, nil, err
	}
	tmp, err := os.MkdirTemp("", "ferry-secret-")
	if err != nil {
		return transfer.Step{}, nil, fmt.Errorf("stage: %w", err)
	}
	cleanup = func() { os.RemoveAll(tmp) }
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	stage := filepath.Join(tmp, "d")
	if err := os.Mkdir(stage, 0o700); err != nil {
		return transfer.Step{}, nil, fmt.Errorf("stage: %w", err)
	}
	dir, name := path.Dir(m.Remote), path.Base(m.Remote)
	if err := copyPrivate(m.Local, filepath.Join(stage, name)); err != nil {
		return transfer.Step{}, nil, err
	}
	return transfer.Step{
		Stat: []string{dir},
		Plan: func(kind func(string) (archive.Kind, error)) (transfer.Placement, error) {
			k, err := kind(dir)
			if err != nil {
				return transfer.Placement{}, fmt.Errorf("stat %s:%s: %w", sb.Name, dir, err)
			}
			switch k {
			case archive.Missing:
				// The directory goes too, so it lands 0700.
				return transfer.Placement{Dest: dir, Place: archive.PlaceAs, Items: []transfer.Item{{Src: stage, Name: path.Base(dir)}}}, nil
			case archive.Dir:
				return transfer.Placement{Dest: dir, Place: archive.PlaceInto, Items: []transfer.Item{{Src: filepath.Join(stage, name), Name: name}}}, nil
			}
			return transfer.Placement{}, fmt.Errorf("%s:%s: %w", sb.Name, dir, transfer.ErrNotDir)
		},
		Name: fmt.Sprintf("upload to %s:%s", sb.Name, m.Remote),
	}, cleanup, nil
}

// copyPrivate copies a file to a new 0600 file.
func copyPrivate(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("stage: %w", err)
	}
	return out.Close()
}

// shell runs a short sh script whose arguments are paths; anything but
// exit 0 is an error.
func shell(ctx context.Context, sb Sandbox, script string, args ...string) error {
	_, err := transfer.Shell(ctx, sb.target(), script, args...)
	return err
}
