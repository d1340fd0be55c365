package ferry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// Sandboxes creates and deletes the sandboxes a Launcher runs in.
// *openshell.Client is one.
type Sandboxes interface {
	// Ensure makes sure that the sandbox spec.Name exists and can run
	// commands, creating it from spec when it does not exist. It is
	// idempotent.
	Ensure(ctx context.Context, spec openshell.Spec) (openshell.Info, error)
	// Delete deletes the sandbox name; a sandbox that does not exist is
	// an error wrapping relay.ErrNotFound.
	Delete(ctx context.Context, name string) error
}

// Handle names a run started by a Launcher, as Rascal's ExecutionHandle
// does: Name is the sandbox, "rascal-<run id>"; ID is the run id.
type Handle struct {
	Backend string
	ID      string
	Name    string
}

// State is what Inspect reports: Rascal's ExecutionState.
type State struct {
	Running bool
	// ExitCode is the command's, once Running is false: 128+signal for a
	// signal, 124 for its timeout, ExitLost when its fate is unknown.
	ExitCode int
}

// ExitLost is the exit code of a run whose command's end could not be
// known: its supervisor was killed, or its sandbox disappeared under it.
// It is docker run's code for a failure of the runtime rather than of the
// command.
const ExitLost = 125

var (
	// ErrUnknownRun means the run directory holds no record of a run
	// started by a Launcher.
	ErrUnknownRun = errors.New("ferry: unknown run")
	// ErrInvalidRunID means a run id cannot name a sandbox: "rascal-" and
	// the id must be at most 63 lower-case letters, digits and single
	// hyphens.
	ErrInvalidRunID = errors.New("ferry: invalid run id")
)

// LauncherConfig configures a Launcher. It is not changed after
// NewLauncher.
type LauncherConfig struct {
	// Sandboxes creates and deletes the sandboxes. Required.
	Sandboxes Sandboxes
	// X runs commands in them. Required.
	X relay.Execer
	// RunsDir holds the run directories, RunsDir/<run id> (Rascal's
	// $RASCAL_DATA_DIR/runs), and their secrets, RunsDir/.<run id>-secrets.
	// Required.
	RunsDir string
	// Store keeps the task sessions; required for a spec with a Runtime.
	Store *session.Store
	// Agents are the agent builds to install. Required: see
	// transfer.ErrAgentRequired.
	Agents agent.Bundle
	// Mode must be transfer.ModeAuto or transfer.ModeAgent (both mean the agent);
	// transfer.ModePOSIX is transfer.ErrAgentRequired.
	Mode     transfer.Mode
	Compress frame.Mode
	// Image is the sandbox image for a spec without one; "" is the
	// gateway's default.
	Image string
	// Backend is Handle.Backend. Default "ferry".
	Backend string
	// FinishTimeout bounds the pull of the artifacts and the session save
	// after the command, which Inspect and Stop do even when their ctx
	// ends sooner (a half-finished run would otherwise be finished again
	// by every poll). Default 2 minutes.
	FinishTimeout time.Duration
	// KillGrace is what a timed-out command has between SIGTERM and
	// SIGKILL. Default 10 seconds.
	KillGrace time.Duration
	// Limits bound the artifacts' pull.
	Limits archive.Limits
	// Logger receives what the Launcher does (never a secret or an
	// environment value); nil discards it.
	Logger *slog.Logger
}

func (c *LauncherConfig) applyDefaults() {
	if c.Backend == "" {
		c.Backend = "ferry"
	}
	if c.FinishTimeout == 0 {
		c.FinishTimeout = 2 * time.Minute
	}
	if c.KillGrace == 0 {
		c.KillGrace = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Launcher runs Rascal's runs detached in sandboxes, with Rascal's four
// calls: StartDetached, Inspect, Stop and Remove. The command runs under
// the ferry agent's supervisor inside the sandbox, so it survives a relay
// drop and the death of the process that started it; the run's progress is
// kept in its run directory, so that another Launcher, in another process,
// can take it over. A Launcher is safe for concurrent use.
type Launcher struct {
	cfg LauncherConfig
}

// NewLauncher checks cfg and returns a Launcher.
func NewLauncher(cfg LauncherConfig) (*Launcher, error) {
	cfg.applyDefaults()
	switch {
	case cfg.Sandboxes == nil:
		return nil, errors.New("new launcher: no Sandboxes")
	case cfg.X == nil:
		return nil, errors.New("new launcher: no Execer")
	case cfg.RunsDir == "":
		return nil, errors.New("new launcher: no RunsDir")
	case cfg.Mode == transfer.ModePOSIX:
		return nil, fmt.Errorf("new launcher: POSIX mode: %w", transfer.ErrAgentRequired)
	case len(cfg.Agents) == 0:
		return nil, fmt.Errorf("new launcher: no agent builds: %w", transfer.ErrAgentRequired)
	case cfg.FinishTimeout < 0 || cfg.KillGrace < 0:
		return nil, errors.New("new launcher: negative timeout")
	}
	abs, err := filepath.Abs(cfg.RunsDir)
	if err != nil {
		return nil, fmt.Errorf("new launcher: %w", err)
	}
	cfg.RunsDir = abs
	return &Launcher{cfg: cfg}, nil
}

// LaunchSpec is one run for StartDetached.
type LaunchSpec struct {
	// RunID names the run: its run directory RunsDir/<RunID> and its
	// sandbox "rascal-<RunID>".
	RunID string
	// TaskID and Repo give the session key, session.TaskKey(Repo,
	// TaskID), unless SessionKey is set.
	TaskID, Repo string
	SessionKey   string
	// Runtime is the coding agent, "goose", "codex" or "claude": its
	// session directory is restored before the command and saved after
	// it. Empty: no session.
	Runtime string
	// SecretsDir holds gh_token, codex_auth.json and claude_oauth_token;
	// default RunsDir/.<RunID>-secrets. A missing directory or file is no
	// secret, and its variable is not set.
	SecretsDir string
	// Image is the sandbox's image; default LauncherConfig.Image.
	Image string
	// Argv is the worker command; Env is added to its environment (never
	// secrets: it is kept in the sandbox's state directory), except the
	// variables the Launcher maps, which Env may not set.
	Argv []string
	Env  map[string]string
	// Workdir is where the command starts, relative to the workspace
	// root; empty is the workspace root.
	Workdir string
	// Timeout, when positive, ends the command (SIGTERM, then SIGKILL
	// after KillGrace) with exit code 124.
	Timeout time.Duration
}

// Where a run's pieces go in the sandbox, relative to its workspace root
// (rascal.md, "Where things go in an OpenShell sandbox").
const (
	secretsRemote = ".rascal-secrets"
	workRemote    = "work"
	// runsStateRemote holds the supervisors' state directories.
	runsStateRemote = ".ferry-runs"
)

// runInputs are what the orchestrator writes into the run directory
// before the run; the ones present are uploaded to the meta directory.
var runInputs = []string{"instructions.md", "context.json", "persistent_instructions.md", "runner.log", "codex"}

// runSecrets are the secret files and the variables that point at them.
var runSecrets = []struct{ file, env string }{
	{"gh_token", "GH_TOKEN_FILE"},
	{"codex_auth.json", "CODEX_AUTH_FILE"},
	{"claude_oauth_token", "CLAUDE_CODE_OAUTH_TOKEN_FILE"},
}

// sessionEnv maps a runtime to the variable that points at its session
// directory, rascal-<runtime>-session.
var sessionEnv = map[string]string{"goose": "GOOSE_PATH_ROOT", "codex": "CODEX_HOME", "claude": "CLAUDE_CONFIG_DIR"}

// mappedEnv are the variables the Launcher sets.
var mappedEnv = map[string]bool{
	"RASCAL_META_DIR": true, "RASCAL_WORK_ROOT": true, "RASCAL_REPO_DIR": true,
	"GH_TOKEN_FILE": true, "CODEX_AUTH_FILE": true, "CLAUDE_CODE_OAUTH_TOKEN_FILE": true,
	"GOOSE_PATH_ROOT": true, "CODEX_HOME": true, "CLAUDE_CONFIG_DIR": true,
}

// maxSandboxName is Rascal's limit on a handle's name (a DNS label).
// Gateways allow less; see SandboxName.
const maxSandboxName = 63

var sandboxNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// HandleFor is the handle of the run runID, checked.
func (l *Launcher) HandleFor(runID string) (Handle, error) {
	name := "rascal-" + runID
	if runID == "" || len(name) > maxSandboxName || !sandboxNameRE.MatchString(name) || strings.Contains(name, "--") {
		return Handle{}, fmt.Errorf("run id %q: %w", runID, ErrInvalidRunID)
	}
	return Handle{Backend: l.cfg.Backend, ID: runID, Name: name}, nil
}

// runOf is the run id and run directory of h.
func (l *Launcher) runOf(h Handle) (string, string, error) {
	id := h.ID
	if id == "" {
		if len(h.Name) <= len("rascal-") || h.Name[:len("rascal-")] != "rascal-" {
			return "", "", fmt.Errorf("handle %q: %w", h.Name, ErrInvalidRunID)
		}
		id = h.Name[len("rascal-"):]
	}
	want, err := l.HandleFor(id)
	if err != nil {
		return "", "", err
	}
	if h.Name != "" && h.Name != want.Name {
		return "", "", fmt.Errorf("handle %q for run %q: %w", h.Name, id, ErrInvalidRunID)
	}
	return id, filepath.Join(l.cfg.RunsDir, id), nil
}

// maxGatewayName is upstream OpenShell's MAX_ROUTABLE_NAME_LEN: a
// sandbox name becomes part of a routed DNS label, so gateways refuse
// names over 19 characters.
const maxGatewayName = 19

// SandboxName is the sandbox that runs h. It is h.Name when that fits an
// OpenShell gateway's 19 characters; a longer Rascal name is fitted to its
// first 10 characters, "-" and 8 hex digits of its SHA-256, the same in
// every process, so that a new Launcher finds the sandbox an earlier one
// created.
func SandboxName(h Handle) string {
	if len(h.Name) <= maxGatewayName {
		return h.Name
	}
	sum := sha256.Sum256([]byte(h.Name))
	return strings.TrimRight(h.Name[:10], "-") + "-" + hex.EncodeToString(sum[:4])
}

// sandbox is the named sandbox in agent mode.
func (l *Launcher) sandbox(name string) Sandbox {
	return Sandbox{X: l.cfg.X, Name: name, Mode: transfer.ModeAgent, Compress: l.cfg.Compress, Agents: l.cfg.Agents, Logger: l.cfg.Logger}
}

// StartDetached creates the run's sandbox, uploads the run directory's
// inputs and the secrets, restores the task's session, and starts the
// command detached under the agent's supervisor; it returns once the
// command runs. It is idempotent: a second call for the same run id, from
// this process or another, finds the sandbox and the command already
// started and starts nothing.
func (l *Launcher) StartDetached(ctx context.Context, spec LaunchSpec) (Handle, error) {
	h, err := l.HandleFor(spec.RunID)
	if err != nil {
		return Handle{}, err
	}
	if len(spec.Argv) == 0 {
		return Handle{}, fmt.Errorf("start run %s: no command", spec.RunID)
	}
	for k := range spec.Env {
		if mappedEnv[k] {
			return Handle{}, fmt.Errorf("start run %s: %s is set by the launcher", spec.RunID, k)
		}
	}
	sessions, err := l.sessionsFor(spec)
	if err != nil {
		return Handle{}, err
	}
	dir := filepath.Join(l.cfg.RunsDir, spec.RunID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
	}
	unlock, err := lockRun(ctx, dir)
	if err != nil {
		return Handle{}, err
	}
	defer unlock()
	if rec, err := readRecord(dir); err == nil && rec.RunID == spec.RunID {
		return h, nil
	} else if err != nil && !errors.Is(err, ErrUnknownRun) {
		return Handle{}, err
	}

	name := SandboxName(h)
	log := l.cfg.Logger.With("run_id", spec.RunID, "sandbox", name)
	image := spec.Image
	if image == "" {
		image = l.cfg.Image
	}
	if _, err := l.cfg.Sandboxes.Ensure(ctx, openshell.Spec{Name: name, Image: image}); err != nil {
		return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
	}
	sb := l.sandbox(name)
	a, err := l.connect(ctx, sb)
	if err != nil {
		return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
	}
	defer a.Close()
	rec := &launchRecord{RunID: spec.RunID, Sandbox: name, StateDir: path.Join(runsStateRemote, spec.RunID), Sessions: sessions, Started: time.Now().UTC()}
	st, err := a.Agent().RunStatus(ctx, rec.StateDir)
	if err != nil {
		return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
	}
	if st.State == agent.RunMissing {
		if err := l.launch(ctx, sb, a, spec, rec); err != nil {
			return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
		}
		log.Info("run started", "image", image)
	} else {
		// An earlier call started it and died before its record.
		log.Info("run already started; adopted", "state", st.State.String())
	}
	// The command runs: a channel that fails as it closes changes nothing.
	if err := a.Close(); err != nil {
		log.Debug("agent connection ended badly after the start", "err", err)
	}
	if err := writeRecord(dir, rec); err != nil {
		return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
	}
	return h, nil
}

// sessionsFor is the spec's session, if it has a runtime.
func (l *Launcher) sessionsFor(spec LaunchSpec) ([]SessionMapping, error) {
	if spec.Runtime == "" {
		return nil, nil
	}
	if _, ok := sessionEnv[spec.Runtime]; !ok {
		return nil, fmt.Errorf("start run %s: unknown runtime %q (want goose, codex or claude)", spec.RunID, spec.Runtime)
	}
	if l.cfg.Store == nil {
		return nil, fmt.Errorf("start run %s: a runtime's session needs a store", spec.RunID)
	}
	key := spec.SessionKey
	if key == "" {
		if spec.Repo == "" && spec.TaskID == "" {
			return nil, fmt.Errorf("start run %s: no session key, repo or task id", spec.RunID)
		}
		key = session.TaskKey(spec.Repo, spec.TaskID)
	}
	if err := session.ValidKey(key); err != nil {
		return nil, fmt.Errorf("start run %s: %w", spec.RunID, err)
	}
	return []SessionMapping{{Key: key, Remote: "rascal-" + spec.Runtime + "-session"}}, nil
}

// launch is the pre-exec phase and the spawn, through one agent
// connection.
func (l *Launcher) launch(ctx context.Context, sb Sandbox, a transfer.Remote, spec LaunchSpec, rec *launchRecord) error {
	pr, err := a.Agent().Probe(ctx)
	if err != nil {
		return err
	}
	ws := pr.Workspace
	if !path.IsAbs(ws) {
		return fmt.Errorf("the agent reports a workspace %q that is not absolute", ws)
	}
	dir := filepath.Join(l.cfg.RunsDir, spec.RunID)
	rs := RunSpec{Sessions: rec.Sessions, Store: l.cfg.Store}
	for _, name := range runInputs {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			rs.Inputs = append(rs.Inputs, Mapping{Local: filepath.Join(dir, name), Remote: path.Join(DefaultMetaDir, name)})
		}
	}
	env := map[string]string{}
	for k, v := range spec.Env {
		env[k] = v
	}
	env["RASCAL_META_DIR"] = path.Join(ws, DefaultMetaDir)
	env["RASCAL_WORK_ROOT"] = path.Join(ws, workRemote)
	env["RASCAL_REPO_DIR"] = path.Join(ws, workRemote, "repo")
	secrets := spec.SecretsDir
	if secrets == "" {
		secrets = filepath.Join(l.cfg.RunsDir, "."+spec.RunID+"-secrets")
	}
	for _, s := range runSecrets {
		if fi, err := os.Stat(filepath.Join(secrets, s.file)); err == nil && fi.Mode().IsRegular() {
			rs.Secrets = append(rs.Secrets, Mapping{Local: filepath.Join(secrets, s.file), Remote: path.Join(secretsRemote, s.file)})
			env[s.env] = path.Join(ws, secretsRemote, s.file)
		}
	}
	restored, err := prepareRun(ctx, sb, a, rs)
	if err != nil {
		return err
	}
	for i, m := range rec.Sessions {
		if restored[i].Restored != nil && restored[i].Restored.Missing {
			// A task's first run: the runtime gets an empty directory,
			// as Docker's bind mount gives it (codex refuses a CODEX_HOME
			// that does not exist).
			if err := makePrivateDir(ctx, a, m.Remote); err != nil {
				return fmt.Errorf("create %s: %w", m.Remote, err)
			}
		}
		env[sessionEnv[spec.Runtime]] = path.Join(ws, m.Remote)
	}
	_, spawned, err := a.Agent().Spawn(ctx, agent.SpawnSpec{
		StateDir: rec.StateDir, RunID: spec.RunID, Argv: spec.Argv, Env: env, Workdir: spec.Workdir,
		Log: path.Join(DefaultMetaDir, "runner.log"), Timeout: spec.Timeout, KillGrace: l.cfg.KillGrace,
	})
	if err != nil {
		return err
	}
	if !spawned {
		l.cfg.Logger.Info("run was spawned by another launcher meanwhile", "run_id", spec.RunID)
	}
	return nil
}

// makePrivateDir creates the directory p (0700) in the sandbox, through
// an upload of an archive that holds only its root.
func makePrivateDir(ctx context.Context, r transfer.Remote, p string) error {
	fill := func(w *archive.Writer) error {
		return w.WriteEntry(ctx, archive.Header{Name: ".", Kind: archive.Dir, Mode: 0o700, ModTime: time.Now()}, nil)
	}
	_, err := r.Upload(ctx, transfer.UploadSpec{Dest: p, Place: archive.PlaceNew}, fill)
	return err
}

// connect opens an agent connection to sb. A sandbox that does not exist
// is an error wrapping relay.ErrNotFound, whatever the agent's dial made
// of it.
func (l *Launcher) connect(ctx context.Context, sb Sandbox) (transfer.Remote, error) {
	r, err := sb.open(ctx)
	if err == nil {
		if r.Agent() != nil {
			return r, nil
		}
		r.Close()
		err = transfer.ErrAgentRequired
	}
	// The dial reports an exec that failed as an agent that did not
	// start; ask the sandbox itself.
	if _, xerr := sb.X.Exec(ctx, &relay.Command{Sandbox: sb.Name, Argv: []string{"true"}}); errors.Is(xerr, relay.ErrNotFound) {
		return nil, fmt.Errorf("sandbox %s: %w", sb.Name, relay.ErrNotFound)
	}
	// transfer.Open already says ErrAgentRequired for an agent that
	// cannot run.
	return nil, err
}

// Inspect reports whether the run is still running. Once its command has
// ended, Inspect pulls the artifacts into the run directory and saves the
// session before it first reports Running false, so that the caller finds
// meta.json then (a missing meta.json does not hold the run up: the
// caller reports its absence). That first report may take up to
// FinishTimeout. Later calls read the run directory only. An error leaves
// the run as it was: the next call tries again.
func (l *Launcher) Inspect(ctx context.Context, h Handle) (State, error) {
	_, dir, err := l.runOf(h)
	if err != nil {
		return State{}, err
	}
	rec, err := readRecord(dir)
	if err != nil {
		return State{}, err
	}
	if rec.Finished {
		return State{ExitCode: rec.ExitCode}, nil
	}
	unlock, ok, err := tryLockRun(dir)
	if err != nil {
		return State{}, err
	}
	if !ok {
		// Another Launcher is starting, stopping or finishing it.
		return State{Running: true}, nil
	}
	defer unlock()
	if rec, err = readRecord(dir); err != nil {
		return State{}, err
	}
	if rec.Finished {
		return State{ExitCode: rec.ExitCode}, nil
	}
	sb := l.sandbox(rec.Sandbox)
	a, err := l.connect(ctx, sb)
	if errors.Is(err, relay.ErrNotFound) {
		return l.finish(ctx, dir, rec, sb, nil, agent.RunStatus{State: agent.RunLost})
	}
	if err != nil {
		return State{}, fmt.Errorf("inspect run %s: %w", rec.RunID, err)
	}
	defer a.Close()
	st, err := a.Agent().RunStatus(ctx, rec.StateDir)
	if err != nil {
		return State{}, fmt.Errorf("inspect run %s: %w", rec.RunID, err)
	}
	if st.State == agent.RunRunning || st.State == agent.RunStarting {
		return State{Running: true}, nil
	}
	return l.finish(ctx, dir, rec, sb, a, st)
}

// maxFinishAttempts bounds how often a run whose pull or session save
// fails is finished again before it is reported ended anyway, its record
// saying what failed.
const maxFinishAttempts = 5

// finish pulls the artifacts and saves the sessions through a (nil: the
// sandbox is gone, nothing can be pulled), then records the run finished.
// A failed pull or save is retried by the next call, up to
// maxFinishAttempts; a missing meta.json or session directory is no
// failure.
func (l *Launcher) finish(ctx context.Context, dir string, rec *launchRecord, sb Sandbox, a transfer.Remote, st agent.RunStatus) (State, error) {
	log := l.cfg.Logger.With("run_id", rec.RunID, "sandbox", rec.Sandbox)
	code := st.ExitCode
	if st.State != agent.RunExited {
		code = ExitLost
	}
	results := make([]RunSession, len(rec.Sessions))
	for i, m := range rec.Sessions {
		results[i].Key = m.Key
	}
	var pres PullResult
	var pullErr, sessErr error
	if a == nil {
		pullErr = fmt.Errorf("sandbox %s: %w", rec.Sandbox, relay.ErrNotFound)
	} else {
		// The caller's ctx may be a short poll: the finish gets its own
		// deadline, or every poll would start it over.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.FinishTimeout)
		defer cancel()
		spec := RunSpec{Out: dir, MetaDir: DefaultMetaDir, Sessions: rec.Sessions, Store: l.cfg.Store, Limits: l.cfg.Limits}
		pres, pullErr, sessErr = finishThrough(fctx, sb, a, spec, results, nil)
	}
	failed := errors.Join(
		ignore(pullErr, ErrNoMeta),
		ignore(sessErr, transfer.ErrNoSource),
	)
	rec.FinishAttempts++
	if failed != nil && a != nil && rec.FinishAttempts < maxFinishAttempts {
		rec.FinishError = failed.Error()
		if err := writeRecord(dir, rec); err != nil {
			log.Warn("cannot record a failed finish", "err", err)
		}
		return State{Running: true}, fmt.Errorf("finish run %s (attempt %d of %d): %w", rec.RunID, rec.FinishAttempts, maxFinishAttempts, failed)
	}
	rec.Finished, rec.ExitCode, rec.TimedOut, rec.Lost = true, code, st.TimedOut, st.State != agent.RunExited
	rec.FinishedAt = time.Now().UTC()
	rec.Pull, rec.SessionResults, rec.FinishError = &pres, results, ""
	if pullErr != nil {
		rec.PullError = pullErr.Error()
	}
	if failed != nil {
		rec.FinishError = failed.Error()
		log.Warn("run finished without all its artifacts or sessions", "err", failed)
	}
	if err := writeRecord(dir, rec); err != nil {
		return State{Running: true}, fmt.Errorf("finish run %s: %w", rec.RunID, err)
	}
	log.Info("run finished", "exit_code", code, "timed_out", st.TimedOut, "lost", rec.Lost, "saved", pres.Saved)
	lost := pres.RelayLost
	for _, r := range results {
		if r.Saved != nil && r.Saved.RelayLost != "" {
			lost = r.Saved.RelayLost
		}
	}
	if lost != "" {
		// No failed finish: what was pulled is in place, and each saved
		// session's snapshot is committed.
		log.Warn("relay lost after the finish had done its work", "err", lost)
	}
	return State{ExitCode: code}, nil
}

// ignore is err, or nil when err matches target.
func ignore(err, target error) error {
	if errors.Is(err, target) {
		return nil
	}
	return err
}

// Stop ends the run's command: SIGTERM to its process group, SIGKILL when
// it has not exited within timeout (5 seconds when not positive, as
// Rascal's Docker launcher has it); then it pulls the artifacts and saves
// the session as Inspect does. A run that has finished is left as it is.
func (l *Launcher) Stop(ctx context.Context, h Handle, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	_, dir, err := l.runOf(h)
	if err != nil {
		return err
	}
	rec, err := readRecord(dir)
	if err != nil {
		return err
	}
	if rec.Finished {
		return nil
	}
	unlock, err := lockRun(ctx, dir)
	if err != nil {
		return err
	}
	defer unlock()
	if rec, err = readRecord(dir); err != nil || rec.Finished {
		return err
	}
	sb := l.sandbox(rec.Sandbox)
	a, err := l.connect(ctx, sb)
	if errors.Is(err, relay.ErrNotFound) {
		_, err = l.finish(ctx, dir, rec, sb, nil, agent.RunStatus{State: agent.RunLost})
		return err
	}
	if err != nil {
		return fmt.Errorf("stop run %s: %w", rec.RunID, err)
	}
	defer a.Close()
	st, err := stopCommand(ctx, a.Agent(), rec.StateDir, timeout)
	if err != nil {
		return fmt.Errorf("stop run %s: %w", rec.RunID, err)
	}
	l.cfg.Logger.Info("run stopped", "run_id", rec.RunID, "exit_code", st.ExitCode, "state", st.State.String())
	_, err = l.finish(ctx, dir, rec, sb, a, st)
	return err
}

// killWait bounds the wait for a command to end after SIGKILL.
const killWait = 10 * time.Second

// stopCommand sends SIGTERM, waits up to timeout, then SIGKILL, and
// returns the command's final status.
func stopCommand(ctx context.Context, c *agent.Client, stateDir string, timeout time.Duration) (agent.RunStatus, error) {
	st, err := c.Signal(ctx, stateDir, false)
	if err != nil || ended(st) {
		return st, err
	}
	if st, err = waitEnded(ctx, c, stateDir, timeout); err != nil || ended(st) {
		return st, err
	}
	if _, err := c.Signal(ctx, stateDir, true); err != nil {
		return st, err
	}
	return waitEnded(ctx, c, stateDir, killWait)
}

func ended(st agent.RunStatus) bool {
	return st.State != agent.RunRunning && st.State != agent.RunStarting
}

// waitEnded polls the command's status until it has ended or d has passed.
func waitEnded(ctx context.Context, c *agent.Client, stateDir string, d time.Duration) (agent.RunStatus, error) {
	deadline := time.Now().Add(d)
	for {
		st, err := c.RunStatus(ctx, stateDir)
		if err != nil || ended(st) || time.Now().After(deadline) {
			return st, err
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return st, ctx.Err()
		case <-t.C:
		}
	}
}

// Remove deletes the run's sandbox; one that is already gone is no error.
// A command still running is killed first, so that nothing writes into
// the sandbox as it goes; its artifacts are then lost (Stop keeps them).
// The run directory and its record stay.
func (l *Launcher) Remove(ctx context.Context, h Handle) error {
	_, dir, err := l.runOf(h)
	if err != nil {
		return err
	}
	name := SandboxName(Handle{Name: "rascal-" + filepath.Base(dir)})
	if rec, err := readRecord(dir); err == nil && !rec.Finished {
		kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if a, err := l.connect(kctx, l.sandbox(name)); err == nil {
			if _, err := a.Agent().Signal(kctx, rec.StateDir, true); err == nil {
				waitEnded(kctx, a.Agent(), rec.StateDir, killWait)
			}
			a.Close()
		}
		cancel()
	}
	if err := l.cfg.Sandboxes.Delete(ctx, name); err != nil && !errors.Is(err, relay.ErrNotFound) {
		return fmt.Errorf("remove run %s: %w", h.Name, err)
	}
	l.cfg.Logger.Info("sandbox removed", "sandbox", name)
	return nil
}
