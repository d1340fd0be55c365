package ferry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/openshell/policy"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/treediff"
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
	// idempotent. One that exists without spec.Match's labels is a
	// *openshell.ForeignError.
	Ensure(ctx context.Context, spec openshell.Spec) (openshell.Info, error)
	// Delete deletes the sandbox name; a sandbox that does not exist is
	// an error wrapping relay.ErrNotFound.
	Delete(ctx context.Context, name string) error
}

// sandboxGetter is a Sandboxes that can look a sandbox up, as
// *openshell.Client can: Remove asks it before it deletes a sandbox no
// run of its own answers to.
type sandboxGetter interface {
	Get(ctx context.Context, name string) (openshell.Info, error)
}

// Handle names a run started by a Launcher, as Rascal's ExecutionHandle
// does and as rascald stores it: Name and ID are both the run's handle
// name (see HandleFor); Backend is LauncherConfig.Backend.
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
	// ErrUnknownRun means no run of a Launcher answers to a handle: it
	// was never started, or its start died before it spawned anything.
	// It is the one error for an unknown handle, as Rascal's
	// ErrExecutionNotFound is.
	ErrUnknownRun = errors.New("ferry: unknown run")
	// ErrInvalidRunID means an empty run id.
	ErrInvalidRunID = errors.New("ferry: invalid run id")
)

// WorkdirError means the spec's working directory is not a directory in
// the sandbox when the command is to start (create it with
// LaunchSpec.Dirs): the command is not started, rather than failing with
// exit code 127 as if its program were missing.
type WorkdirError struct {
	RunID string
	// Dir is the working directory, relative to the workspace root.
	Dir string
	// Kind is what is there instead: archive.Missing, or a file.
	Kind archive.Kind
}

func (e *WorkdirError) Error() string {
	return fmt.Sprintf("run %s: working directory %s is %s in the sandbox, not a directory", e.RunID, e.Dir, e.Kind)
}

// LauncherConfig configures a Launcher. It is not changed after
// NewLauncher.
type LauncherConfig struct {
	// Sandboxes creates and deletes the sandboxes. Required.
	Sandboxes Sandboxes
	// X runs commands in them. Required.
	X relay.Execer
	// RunsDir holds the default run directories, RunsDir/<run id>
	// (Rascal's $RASCAL_DATA_DIR/runs), and the index that maps a
	// handle's name to its run directory, RunsDir/.ferry-handles.
	// Required.
	RunsDir string
	// Store keeps the task sessions; required for a spec with Sessions.
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
	// PolicyPath is the sandboxes' policy: a YAML file, or a built-in
	// policy ("default", "deny-all"; see package policy). It is read and
	// checked as the gateway would check it once, by NewLauncher; "" leaves
	// the policy to the gateway.
	PolicyPath string
	// Providers name the gateway's providers attached to every sandbox
	// (SandboxSpec.providers): their credentials stay at the gateway,
	// which injects them into the sandbox's requests.
	Providers []string
	// Env is every sandbox's static environment
	// (SandboxSpec.environment), seen by every process in it. It is the
	// configuration's alone: nothing of the Launcher's own environment is
	// added. Never a secret.
	Env map[string]string
	// Labels are added to every sandbox's labels, each value made a label
	// value by openshell.LabelValue. The Launcher adds its own:
	// ferry.managed=true and RunIDLabel.
	Labels map[string]string
	// RunIDLabel is the label that says which run a sandbox was made for
	// (its value openshell.LabelValue(RunID)): a sandbox of the run's name
	// without it, or made for another run, is refused, never reused.
	// Default "ferry.run_id".
	RunIDLabel string
	// Resources are every sandbox's CPU, memory and GPU.
	Resources openshell.Resources
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
	// Limits bound the artifacts' pull, and the live copies of the logs.
	Limits archive.Limits
	// LiveLogs are the logs copied into the run directory while the run
	// runs.
	LiveLogs LiveLogs
	// Logger receives what the Launcher does (never a secret or an
	// environment value); nil discards it.
	Logger *slog.Logger
	// AfterSpawn, when set, is called by StartDetached once the command
	// is spawned and before its record says so: a crash point for tests
	// of a start that dies there (runtime.Goexit in it stands for the
	// process's death). Nil in production.
	AfterSpawn func(runID string)
}

func (c *LauncherConfig) applyDefaults() {
	if c.Backend == "" {
		c.Backend = "ferry"
	}
	if c.RunIDLabel == "" {
		c.RunIDLabel = "ferry.run_id"
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
	c.LiveLogs.applyDefaults()
}

// Launcher runs commands detached in sandboxes, with Rascal's four calls:
// StartDetached, Inspect, Stop and Remove. The command runs under the
// ferry agent's supervisor inside the sandbox, so it survives a relay drop
// and the death of the process that started it; the run's progress is
// kept in its run directory, so that another Launcher, in another process,
// can take it over. A Launcher is safe for concurrent use. It knows no
// Rascal layout: package rascal says which files, directories and
// variables a Rascal run has.
type Launcher struct {
	cfg LauncherConfig
	// policy is PolicyPath's, checked; nil without one.
	policy *policy.Policy
	// agents remembers the sandboxes where the agent has answered: a
	// run's later connections (its status, its pull, its session) send
	// their first call with their hello, a round trip sooner.
	agents agent.Memory
}

// ManagedLabel marks every sandbox a Launcher creates.
const ManagedLabel = "ferry.managed"

// PolicyError is a LauncherConfig.PolicyPath that cannot be the
// sandboxes' policy: unreadable, not a policy (a *policy.SyntaxError), or
// one the gateway would refuse (a *policy.UnsafeError, ...). Each names
// the key at fault and its line.
type PolicyError struct {
	Path string
	Err  error
}

func (e *PolicyError) Error() string { return fmt.Sprintf("policy %s: %v", e.Path, e.Err) }
func (e *PolicyError) Unwrap() error { return e.Err }

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
	l := &Launcher{cfg: cfg, agents: agent.NewMemory()}
	if cfg.PolicyPath != "" {
		p, err := policy.Load(cfg.PolicyPath)
		if err == nil {
			err = p.Check()
		}
		if err != nil {
			return nil, fmt.Errorf("new launcher: %w", &PolicyError{Path: cfg.PolicyPath, Err: err})
		}
		l.policy = p
	}
	for _, k := range append(slices.Sorted(maps.Keys(cfg.Labels)), cfg.RunIDLabel) {
		if err := openshell.CheckLabelKey(k); err != nil {
			return nil, fmt.Errorf("new launcher: %w", err)
		}
	}
	for k := range cfg.Env {
		if !envNameRE.MatchString(k) {
			return nil, fmt.Errorf("new launcher: environment variable %q: not a variable name", k)
		}
	}
	for _, p := range cfg.Providers {
		if strings.TrimSpace(p) == "" {
			return nil, errors.New("new launcher: an empty provider name")
		}
	}
	if err := cfg.Resources.Check(); err != nil {
		return nil, fmt.Errorf("new launcher: %w", err)
	}
	return l, nil
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// sandboxSpec is what the run's sandbox is created from: the
// configuration and the spec's labels, nothing else (no variable of the
// process's environment, no secret).
func (l *Launcher) sandboxSpec(name, image string, spec LaunchSpec) openshell.Spec {
	labels := make(map[string]string, len(l.cfg.Labels)+len(spec.Labels)+2)
	for _, m := range []map[string]string{l.cfg.Labels, spec.Labels} {
		for k, v := range m {
			labels[k] = openshell.LabelValue(v)
		}
	}
	labels[ManagedLabel] = "true"
	labels[l.cfg.RunIDLabel] = openshell.LabelValue(spec.RunID)
	return openshell.Spec{
		Name: name, Image: image, Env: maps.Clone(l.cfg.Env), Labels: labels, Policy: l.policy,
		Providers: slices.Clone(l.cfg.Providers), Resources: l.cfg.Resources, Match: []string{l.cfg.RunIDLabel},
	}
}

// LaunchSpec is one run for StartDetached.
type LaunchSpec struct {
	// RunID names the run; its handle is HandleFor(RunID).
	RunID string
	// RunDir is the run's host directory: Inputs come from it, the
	// artifacts land in it, and it holds the run's record. Default
	// RunsDir/<RunID>.
	RunDir string
	// SecretsDir holds the Secrets; default SecretsDir(RunDir).
	SecretsDir string
	// Inputs are names in RunDir (files or directories) uploaded into the
	// meta directory before the command; a missing one is skipped.
	Inputs []string
	// Secrets are file names in SecretsDir uploaded into the sandbox's
	// secrets directory, 0600 in a 0700 directory; a missing one is
	// skipped.
	Secrets []string
	// Sessions are restored from the store before the command (a key
	// without a snapshot yet gets an empty 0700 directory) and saved
	// after it however it ended.
	Sessions []SessionMapping
	// Dirs are directories, relative to the workspace root, created
	// (0755) before the command, after the inputs.
	Dirs []string
	// Image is the sandbox's image; default LauncherConfig.Image.
	Image string
	// Labels are added to the sandbox's (LauncherConfig.Labels), each
	// value made a label value by openshell.LabelValue; a key that is not
	// a label key is the gateway's error.
	Labels map[string]string
	// Argv is the command. Its output is appended to the meta
	// directory's runner.log.
	Argv []string
	// Env is added to the command's environment as it is. It is kept in
	// the sandbox's state directory: never put a secret here (Secrets
	// carries them).
	Env map[string]string
	// PathEnv is added to the environment too, each value a sandbox path
	// named with the placeholders of ExpandPath (${WORKSPACE}, ${META},
	// ${WORK}, ${SECRETS}), which the Launcher replaces once it knows the
	// sandbox's workspace root. Apart from Env so that no text of the
	// caller's (an instruction in RASCAL_INSTRUCTION) is ever expanded. A
	// variable in both is an error.
	PathEnv map[string]string
	// Workdir is where the command starts, relative to the workspace
	// root; empty is the workspace root. It must be a directory when the
	// command starts (list it in Dirs): else StartDetached fails with a
	// *WorkdirError.
	Workdir string
	// Timeout, when positive, ends the command (SIGTERM, then SIGKILL
	// after KillGrace) with exit code 124.
	Timeout time.Duration
	// Diff are directories, relative to the workspace root, listed
	// before the command (after the inputs, sessions and Dirs) and again
	// at the finish, their diffs, limited to DiffFilter's paths, written
	// to the run directory's workspace-diff.json, as ferry run --diff
	// writes it (a Rascal run's "work/repo": the runner clones it, so
	// everything in it is created).
	Diff       []string
	DiffFilter treediff.Filter
}

// Where a run's pieces go in the sandbox, relative to its workspace root
// (rascal.md, "Where things go in an OpenShell sandbox").
const (
	// SecretsRemote is the sandbox's secrets directory (0700).
	SecretsRemote = ".rascal-secrets"
	// WorkRemote is the sandbox's work directory, Docker's /work.
	WorkRemote = "work"
	// runsStateRemote holds the supervisors' state directories.
	runsStateRemote = ".ferry-runs"
)

// ExpandPath replaces, in v, each placeholder that names a sandbox path by
// that path, absolute, in a sandbox whose workspace root is ws:
//
//	${WORKSPACE}  the workspace root
//	${META}       the meta directory, DefaultMetaDir (Docker's /rascal-meta)
//	${WORK}       the work directory, WorkRemote (Docker's /work)
//	${SECRETS}    the secrets directory, SecretsRemote (/run/rascal-secrets)
//
// Anything else, another "${...}" or "$X" included, is left as it is: the
// value is not given to a shell.
func ExpandPath(v, ws string) string {
	if !strings.Contains(v, "${") {
		return v
	}
	return strings.NewReplacer(
		"${WORKSPACE}", ws,
		"${META}", path.Join(ws, DefaultMetaDir),
		"${WORK}", path.Join(ws, WorkRemote),
		"${SECRETS}", path.Join(ws, SecretsRemote),
	).Replace(v)
}

// SecretsDir is Rascal's default secrets directory of a run directory:
// .<base>-secrets beside it.
func SecretsDir(runDir string) string {
	runDir = filepath.Clean(strings.TrimSpace(runDir))
	return filepath.Join(filepath.Dir(runDir), "."+filepath.Base(runDir)+"-secrets")
}

// maxHandleName is Rascal's limit on a container's name (and so on a
// handle's). Gateways allow less; see SandboxName.
const maxHandleName = 63

// handleName is Rascal's sanitizeContainerName("rascal-" + runID):
// lower-cased, every character outside [a-z0-9_-] a "-", "-" and "_"
// trimmed from both ends, at most 63 bytes.
func handleName(runID string) string {
	s := strings.ToLower("rascal-" + strings.TrimSpace(runID))
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-_")
	if out == "" {
		out = "rascal-run"
	}
	if len(out) > maxHandleName {
		out = out[:maxHandleName]
	}
	return out
}

// HandleFor is the handle of the run runID, as Rascal derives it before
// the start (runner.ExecutionHandleForRun) and as rascald saves it:
// Name and ID are sanitizeContainerName("rascal-" + runID). Only an
// empty id is refused.
func (l *Launcher) HandleFor(runID string) (Handle, error) {
	if strings.TrimSpace(runID) == "" {
		return Handle{}, fmt.Errorf("run id %q: %w", runID, ErrInvalidRunID)
	}
	name := handleName(runID)
	return Handle{Backend: l.cfg.Backend, ID: name, Name: name}, nil
}

// handleKey is the name a handle is known by: its ID, else its Name, as
// Rascal's Docker backend picks its target.
func handleKey(h Handle) string {
	if id := strings.TrimSpace(h.ID); id != "" {
		return id
	}
	return strings.TrimSpace(h.Name)
}

// runOf is the run directory of h, from the handle index; a handle the
// index does not know is ErrUnknownRun.
// RunDir is the host directory of h's run: its artifacts and its record.
// A handle no run answers to is ErrUnknownRun.
func (l *Launcher) RunDir(h Handle) (string, error) {
	return l.runOf(h)
}

func (l *Launcher) runOf(h Handle) (string, error) {
	key := handleKey(h)
	if key == "" {
		return "", fmt.Errorf("empty handle: %w", ErrUnknownRun)
	}
	return readIndex(l.cfg.RunsDir, key)
}

// maxGatewayName is upstream OpenShell's MAX_ROUTABLE_NAME_LEN: a
// sandbox name becomes part of a routed DNS label, so gateways refuse
// names over 19 characters.
const maxGatewayName = 19

var sandboxNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// SandboxName is the sandbox that runs h. It is h's name when that is a
// DNS label of at most 19 characters, as OpenShell gateways want; any
// other name (longer, or with Rascal's "_") is fitted to its first 10
// characters made a label, "-" and 8 hex digits of its SHA-256, the same
// in every process, so that a new Launcher finds the sandbox an earlier
// one created.
func SandboxName(h Handle) string {
	name := handleKey(h)
	if len(name) <= maxGatewayName && sandboxNameRE.MatchString(name) && !strings.Contains(name, "--") {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	prefix := name
	if len(prefix) > 10 {
		prefix = prefix[:10]
	}
	prefix = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, prefix)
	for strings.Contains(prefix, "--") {
		prefix = strings.ReplaceAll(prefix, "--", "-")
	}
	prefix = strings.Trim(prefix, "-")
	if prefix == "" {
		prefix = "rascal"
	}
	return prefix + "-" + hex.EncodeToString(sum[:4])
}

// sandbox is the named sandbox in agent mode.
func (l *Launcher) sandbox(name string) Sandbox {
	return Sandbox{X: l.cfg.X, Name: name, Mode: transfer.ModeAgent, Compress: l.cfg.Compress, Agents: l.cfg.Agents, AgentMemory: l.agents, Logger: l.cfg.Logger}
}

// StartDetached creates the run's sandbox, uploads the run directory's
// inputs and the secrets, restores the sessions, creates the directories,
// and starts the command detached under the agent's supervisor; it returns
// once the command runs. Before anything else it records the handle's run
// directory and its intent to start, so that a Launcher in another
// process that inspects the handle meanwhile, or after this one died,
// finds the run: the command the sandbox's supervisor reports is adopted.
// It is idempotent: a second call for the same run id, from this process
// or another, finds the command already started and starts nothing.
func (l *Launcher) StartDetached(ctx context.Context, spec LaunchSpec) (Handle, error) {
	h, err := l.HandleFor(spec.RunID)
	if err != nil {
		return Handle{}, err
	}
	if len(spec.Argv) == 0 {
		return Handle{}, fmt.Errorf("start run %s: no command", spec.RunID)
	}
	for k := range spec.PathEnv {
		if _, ok := spec.Env[k]; ok {
			return Handle{}, fmt.Errorf("start run %s: %s is in both Env and PathEnv", spec.RunID, k)
		}
	}
	if err := l.checkSessions(spec); err != nil {
		return Handle{}, err
	}
	dir := spec.RunDir
	if dir == "" {
		dir = filepath.Join(l.cfg.RunsDir, spec.RunID)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
	}
	if spec.SecretsDir == "" {
		spec.SecretsDir = SecretsDir(dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
	}
	unlock, err := lockRun(ctx, dir)
	if err != nil {
		return Handle{}, err
	}
	defer unlock()
	rec, err := readRecord(dir)
	switch {
	case err == nil && rec.RunID != spec.RunID:
		return Handle{}, fmt.Errorf("start run %s: %s holds run %s", spec.RunID, dir, rec.RunID)
	case err == nil && rec.Spawned:
		return h, nil
	case err == nil && rec.Foreign != "":
		// A retry: the sandbox in the way may be gone by now.
		rec.Finished, rec.ExitCode, rec.Lost, rec.Foreign, rec.FinishedAt = false, 0, false, "", time.Time{}
	case err != nil && !errors.Is(err, ErrUnknownRun):
		return Handle{}, err
	case err != nil:
		rec = &launchRecord{RunID: spec.RunID, Sandbox: SandboxName(h), StateDir: path.Join(runsStateRemote, spec.RunID), Started: time.Now().UTC()}
	}
	// The intent first: from here on the handle names this run, and a
	// Launcher that finds the record unspawned asks the sandbox.
	rec.Sessions = spec.Sessions
	rec.Diff, rec.DiffFilter = spec.Diff, nil
	if len(spec.Diff) > 0 {
		if err := spec.DiffFilter.Validate(); err != nil {
			return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
		}
		f := spec.DiffFilter
		rec.DiffFilter = &f
	}
	if err := writeIndex(l.cfg.RunsDir, h.Name, spec.RunID, dir); err != nil {
		return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
	}
	if err := writeRecord(dir, rec); err != nil {
		return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
	}

	log := l.cfg.Logger.With("run_id", spec.RunID, "sandbox", rec.Sandbox)
	image := spec.Image
	if image == "" {
		image = l.cfg.Image
	}
	if _, err := l.cfg.Sandboxes.Ensure(ctx, l.sandboxSpec(rec.Sandbox, image, spec)); err != nil {
		var foreign *openshell.ForeignError
		if errors.As(err, &foreign) {
			// The intent must not stand: a Launcher that found it unspawned
			// would ask that sandbox for the run and delete it.
			rec.Finished, rec.ExitCode, rec.Lost, rec.Foreign = true, ExitLost, true, foreign.Error()
			rec.FinishedAt = time.Now().UTC()
			if werr := writeRecord(dir, rec); werr != nil {
				log.Warn("cannot record a refused sandbox", "err", werr)
			}
			log.Warn("sandbox of the run's name made for another run; refused", "err", err)
		}
		return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
	}
	sb := l.sandbox(rec.Sandbox)
	a, err := l.connect(ctx, sb)
	if err != nil {
		return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
	}
	defer a.Close()
	st, err := a.Agent().RunStatus(ctx, rec.StateDir)
	if err != nil {
		return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
	}
	if st.State == agent.RunMissing {
		if err := l.launch(ctx, sb, a, spec, dir, rec); err != nil {
			return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
		}
		log.Info("run started", "image", image)
	} else {
		// An earlier call spawned it and died before its record.
		log.Info("run already started; adopted", "state", st.State.String())
	}
	if l.cfg.AfterSpawn != nil {
		l.cfg.AfterSpawn(spec.RunID)
	}
	// The command runs: a channel that fails as it closes changes nothing.
	if err := a.Close(); err != nil {
		log.Debug("agent connection ended badly after the start", "err", err)
	}
	rec.Spawned = true
	if err := writeRecord(dir, rec); err != nil {
		return Handle{}, fmt.Errorf("start run %s: %w", spec.RunID, err)
	}
	return h, nil
}

// checkSessions checks the spec's session keys, and that there is a store
// to keep them.
func (l *Launcher) checkSessions(spec LaunchSpec) error {
	if len(spec.Sessions) == 0 {
		return nil
	}
	if l.cfg.Store == nil {
		return fmt.Errorf("start run %s: sessions need a store", spec.RunID)
	}
	for _, m := range spec.Sessions {
		if err := session.ValidKey(m.Key); err != nil {
			return fmt.Errorf("start run %s: %w", spec.RunID, err)
		}
		if m.Remote == "" {
			return fmt.Errorf("start run %s: session %s has no sandbox directory", spec.RunID, m.Key)
		}
	}
	return nil
}

// launch is the pre-exec phase and the spawn, through one agent
// connection.
func (l *Launcher) launch(ctx context.Context, sb Sandbox, a transfer.Remote, spec LaunchSpec, dir string, rec *launchRecord) error {
	pr, err := a.Agent().Probe(ctx)
	if err != nil {
		return err
	}
	ws := pr.Workspace
	if !path.IsAbs(ws) {
		return fmt.Errorf("the agent reports a workspace %q that is not absolute", ws)
	}
	rs := RunSpec{Sessions: rec.Sessions, Store: l.cfg.Store}
	for _, name := range spec.Inputs {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			rs.Inputs = append(rs.Inputs, Mapping{Local: filepath.Join(dir, name), Remote: path.Join(DefaultMetaDir, name)})
		}
	}
	for _, name := range spec.Secrets {
		if fi, err := os.Stat(filepath.Join(spec.SecretsDir, name)); err == nil && fi.Mode().IsRegular() {
			rs.Secrets = append(rs.Secrets, Mapping{Local: filepath.Join(spec.SecretsDir, name), Remote: path.Join(SecretsRemote, name)})
		}
	}
	env := make(map[string]string, len(spec.Env)+len(spec.PathEnv))
	for k, v := range spec.Env {
		env[k] = v
	}
	for k, v := range spec.PathEnv {
		env[k] = ExpandPath(v, ws)
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
	}
	if err := makeDirs(ctx, a, spec.Dirs); err != nil {
		return err
	}
	if spec.Workdir != "" {
		k, err := a.Agent().Stat(ctx, spec.Workdir, true)
		if err != nil {
			return fmt.Errorf("working directory %s: %w", spec.Workdir, err)
		}
		if k != archive.Dir {
			return &WorkdirError{RunID: spec.RunID, Dir: spec.Workdir, Kind: k}
		}
	}
	if err := l.takeDiffBefore(ctx, a, dir, spec.Diff); err != nil {
		return err
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

// makeDirs creates the directories dirs (0755, with their parents) in the
// sandbox, in one upload into the workspace root; those that exist stay
// as they are but for their mode.
func makeDirs(ctx context.Context, r transfer.Remote, dirs []string) error {
	if len(dirs) == 0 {
		return nil
	}
	var all []string
	seen := map[string]bool{}
	for _, d := range dirs {
		d = path.Clean(d)
		if d == "." || path.IsAbs(d) || d == ".." || strings.HasPrefix(d, "../") {
			return fmt.Errorf("directory %q is not inside the workspace", d)
		}
		var parents []string
		for p := d; p != "." && !seen[p]; p = path.Dir(p) {
			seen[p] = true
			parents = append(parents, p)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			all = append(all, parents[i])
		}
	}
	fill := func(w *archive.Writer) error {
		for _, d := range all {
			if err := w.WriteEntry(ctx, archive.Header{Name: d, Kind: archive.Dir, Mode: 0o755, ModTime: time.Now()}, nil); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := r.Upload(ctx, transfer.UploadSpec{Dest: ".", Place: archive.PlaceInto, Entries: int64(len(all))}, fill); err != nil {
		return fmt.Errorf("create directories %s: %w", strings.Join(dirs, ", "), err)
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
// sessions before it first reports Running false, so that the caller finds
// meta.json then (a missing meta.json does not hold the run up: the
// caller reports its absence). That first report may take up to
// FinishTimeout; later calls read the run directory only. While the
// command runs, each call also appends to the run directory's live copies
// of its logs what the sandbox's files gained (LiveLogs). A run whose
// start is under way elsewhere is running; one whose start died before
// it spawned the command is ErrUnknownRun (its sandbox is deleted), and
// one whose start died after is adopted. Any other error leaves the run
// as it was: the next call tries again.
func (l *Launcher) Inspect(ctx context.Context, h Handle) (State, error) {
	dir, err := l.runOf(h)
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
	sb, a, st, err := l.attach(ctx, dir, rec)
	if err != nil {
		return State{}, fmt.Errorf("inspect run %s: %w", rec.RunID, err)
	}
	if a != nil {
		defer a.Close()
	}
	if st.State == agent.RunRunning || st.State == agent.RunStarting {
		l.followStep(ctx, dir, rec, a.Agent())
		return State{Running: true}, nil
	}
	return l.finish(ctx, dir, rec, sb, a, st)
}

// attach connects to the run's sandbox and reports its command. A
// sandbox that is gone gives a nil Remote and RunLost. A record whose
// start died before the command was spawned gives ErrUnknownRun, and its
// sandbox is deleted; one whose start died after it is adopted: the
// record says spawned from now on. The caller holds the run's lock.
func (l *Launcher) attach(ctx context.Context, dir string, rec *launchRecord) (Sandbox, transfer.Remote, agent.RunStatus, error) {
	sb := l.sandbox(rec.Sandbox)
	a, err := l.connect(ctx, sb)
	if errors.Is(err, relay.ErrNotFound) {
		if !rec.Spawned {
			return sb, nil, agent.RunStatus{}, fmt.Errorf("its start died before the sandbox ran it: %w", ErrUnknownRun)
		}
		return sb, nil, agent.RunStatus{State: agent.RunLost}, nil
	}
	if err != nil {
		return sb, nil, agent.RunStatus{}, err
	}
	st, err := a.Agent().RunStatus(ctx, rec.StateDir)
	if err != nil {
		a.Close()
		return sb, nil, agent.RunStatus{}, err
	}
	if !rec.Spawned {
		if st.State == agent.RunMissing {
			a.Close()
			if err := l.cfg.Sandboxes.Delete(ctx, rec.Sandbox); err != nil && !errors.Is(err, relay.ErrNotFound) {
				l.cfg.Logger.Warn("cannot delete the sandbox of a start that died", "run_id", rec.RunID, "sandbox", rec.Sandbox, "err", err)
			}
			return sb, nil, agent.RunStatus{}, fmt.Errorf("its start died before it spawned the command: %w", ErrUnknownRun)
		}
		rec.Spawned = true
		if err := writeRecord(dir, rec); err != nil {
			a.Close()
			return sb, nil, agent.RunStatus{}, err
		}
		l.cfg.Logger.Info("run whose start died after the spawn adopted", "run_id", rec.RunID, "state", st.State.String())
	}
	return sb, a, st, nil
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
		var fails []RunDiff
		spec.diffs, fails = l.diffBefore(dir, rec)
		if rec.DiffFilter != nil {
			spec.DiffFilter = *rec.DiffFilter
		}
		pres, pullErr, sessErr = finishThrough(fctx, sb, a, spec, results, nil, nil)
		var derr error
		if rec.DiffResults, derr = diffDone(spec.diffs, fails); derr != nil {
			log.Warn("run's diff incomplete", "err", derr)
		}
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
	l.endLive(dir, pres, pullErr)
	// The sandbox is this run's alone: every event its log keeps since
	// the start is the run's, in the run directory beside the artifacts.
	if src, ok := l.cfg.Sandboxes.(LogSource); ok {
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		ev := WriteEvents(ectx, src, rec.Sandbox, dir, rec.Started.Add(-EventsSkew))
		cancel()
		rec.Events = &ev
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
	os.RemoveAll(filepath.Join(dir, diffBeforeDir))
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
// the sessions as Inspect does. A run that has finished is left as it is.
func (l *Launcher) Stop(ctx context.Context, h Handle, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	dir, err := l.runOf(h)
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
	sb, a, st, err := l.attach(ctx, dir, rec)
	if err != nil {
		return fmt.Errorf("stop run %s: %w", rec.RunID, err)
	}
	if a == nil {
		_, err = l.finish(ctx, dir, rec, sb, nil, st)
		return err
	}
	defer a.Close()
	if !ended(st) {
		if st, err = stopCommand(ctx, a.Agent(), rec.StateDir, timeout); err != nil {
			return fmt.Errorf("stop run %s: %w", rec.RunID, err)
		}
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

// Remove deletes the run's sandbox; one that is already gone, or a
// handle no run answers to, is no error (as docker rm -f). A sandbox
// made for another run (StartDetached refused it), or one of an unknown
// handle's name that no Launcher made (no ferry.managed label), is left
// alone. A command still running is killed first, so that nothing
// writes into the sandbox as it goes; its artifacts are then lost (Stop
// keeps them). The run directory,
// its record and the handle's index entry stay: Inspect still reports
// how the run ended.
func (l *Launcher) Remove(ctx context.Context, h Handle) error {
	key := handleKey(h)
	if key == "" {
		return nil
	}
	name := SandboxName(h)
	known := false
	if dir, err := l.runOf(h); err == nil {
		if rec, err := readRecord(dir); err == nil {
			known = true
			if rec.Foreign != "" {
				l.cfg.Logger.Info("sandbox of another run left alone", "run_id", rec.RunID, "sandbox", rec.Sandbox)
				return nil
			}
			name = rec.Sandbox
			if !rec.Finished {
				kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				if a, err := l.connect(kctx, l.sandbox(name)); err == nil {
					if _, err := a.Agent().Signal(kctx, rec.StateDir, true); err == nil {
						waitEnded(kctx, a.Agent(), rec.StateDir, killWait)
					}
					a.Close()
				}
				cancel()
			}
		}
	} else if !errors.Is(err, ErrUnknownRun) {
		return fmt.Errorf("remove run %s: %w", key, err)
	}
	if g, ok := l.cfg.Sandboxes.(sandboxGetter); ok && !known {
		// No run of ours answers to h: a sandbox of its name that no
		// Launcher made is someone else's.
		info, err := g.Get(ctx, name)
		if errors.Is(err, relay.ErrNotFound) {
			return nil
		}
		if err == nil && info.Labels[ManagedLabel] != "true" {
			l.cfg.Logger.Info("sandbox no Launcher made left alone", "sandbox", name)
			return nil
		}
	}
	if err := l.cfg.Sandboxes.Delete(ctx, name); err != nil && !errors.Is(err, relay.ErrNotFound) {
		return fmt.Errorf("remove run %s: %w", key, err)
	}
	l.cfg.Logger.Info("sandbox removed", "sandbox", name)
	if known {
		return l.markRemoved(ctx, h)
	}
	return nil
}

// markRemoved records that h's run was removed, under the run's lock so
// that a finish under way cannot write its record over it.
func (l *Launcher) markRemoved(ctx context.Context, h Handle) error {
	dir, err := l.runOf(h)
	if err != nil {
		return fmt.Errorf("remove run %s: %w", handleKey(h), err)
	}
	lctx, cancel := context.WithTimeout(ctx, l.cfg.FinishTimeout)
	defer cancel()
	unlock, err := lockRun(lctx, dir)
	if err != nil {
		return fmt.Errorf("remove run %s: %w", handleKey(h), err)
	}
	defer unlock()
	rec, err := readRecord(dir)
	if errors.Is(err, ErrUnknownRun) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove run %s: %w", handleKey(h), err)
	}
	rec.Removed = true
	if err := writeRecord(dir, rec); err != nil {
		return fmt.Errorf("remove run %s: %w", handleKey(h), err)
	}
	return nil
}
