// Package rascal speaks Rascal's runner contract (github.com/rtzll/rascal,
// internal/runner) on top of ferry's Launcher: Runner has Rascal's four
// calls with Rascal's signatures, and Spec, ExecutionHandle and
// ExecutionState are Rascal's types field for field, so that the adapter
// inside Rascal converts types and decides nothing (README.md, "Using
// ferry from Rascal"). What a run holds and where each piece goes in a
// sandbox is one table, in layout.go.
package rascal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/stores"
	"github.com/ferry-dev/ferry/session/treediff"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/bundle"
)

// Config is what an orchestrator tells New.
type Config struct {
	// Gateway is the OpenShell gateway. Zero: the gateway the openshell
	// CLI would use (GatewayName, else $OPENSHELL_GATEWAY_ENDPOINT,
	// $OPENSHELL_GATEWAY, the active gateway; openshell.Resolve).
	Gateway openshell.Settings
	// GatewayName names a stored gateway, as OPENSHELL_GATEWAY does; used
	// when Gateway is zero.
	GatewayName string
	// Store is the session store: a directory (created when missing) or
	// s3://BUCKET/PREFIX; "" is session.DefaultLocation.
	Store string
	// StoreOptions shape the store's opening; Create is implied for a
	// directory.
	StoreOptions stores.Options
	// RunsDir holds the handle index (and the run directories of a spec
	// without RunDir): Rascal's $RASCAL_DATA_DIR/runs. Required.
	RunsDir string
	// Image is the sandbox image of a spec without RunnerImage (Rascal's
	// DefaultImage); "" is the gateway's default.
	Image string
	// GitHubToken is Rascal's DockerRunner.GitHubToken: written to the
	// secrets directory's gh_token (0600) before each run, and named by
	// GH_TOKEN_FILE. Never put in the environment.
	GitHubToken string
	// Command is the worker; default DefaultCommand.
	Command []string
	// Env is added to every run's environment, under the layout's
	// variables (which win): what the sandbox image lacks of Rascal's,
	// such as a PATH that finds rascal-runner and the agent CLIs. Never
	// a secret.
	Env map[string]string
	// PolicyPath is every sandbox's policy: a YAML file, or "default" or
	// "deny-all" (ferry's built-in ones); read and checked once by New.
	// "" leaves it to the gateway.
	PolicyPath string
	// Providers name the gateway's providers attached to every sandbox.
	// A provider that covers a secret (Coverage; README.md, "Providers
	// and Rascal's secrets") keeps it at the gateway: its file is not
	// uploaded, nor written, and its *_FILE variable is not set. Each
	// must exist in the gateway's workspace (ferry provider create): a
	// gateway refuses a sandbox that attaches an unknown one, so every
	// run would fail (openshell.ErrProviderNotFound).
	Providers []string
	// ProviderTypes is the type of each provider whose name is not its
	// type ("my-github": "github").
	ProviderTypes map[string]string
	// SandboxEnv is every sandbox's static environment; nil is
	// DefaultSandboxEnv. Never a secret.
	SandboxEnv map[string]string
	// Security is Rascal's DockerSecurityConfig: its CPUs and Memory
	// become every sandbox's resource limits in baseline and strict mode,
	// as Docker applies them (Memory in Docker's units, "4g", made
	// OpenShell's "4Gi"). The rest has no sandbox equivalent (README.md).
	Security DockerSecurityConfig
	// Diff are sandbox directories, relative to the workspace root,
	// whose changes each run writes to its run directory's
	// workspace-diff.json ("work/repo" is the repository the worker
	// clones, so all of it is created; nil: none). DiffFilter limits
	// them ({Exclude: [".git/**"]}).
	Diff       []string
	DiffFilter treediff.Filter
	// Agents are the ferry agent builds; default those ferry embeds.
	Agents agent.Bundle
	// FinishTimeout and KillGrace are the Launcher's (zero: its
	// defaults).
	FinishTimeout, KillGrace time.Duration
	// Logger receives what the Runner does; nil discards it.
	Logger *slog.Logger
	// AfterSpawn is the Launcher's crash point for tests; nil in
	// production.
	AfterSpawn func(runID string)
}

// Runner is Rascal's runner.Runner over ferry. It is safe for concurrent
// use, and any number of Runners in any processes may share a RunsDir:
// each takes over the runs the others started.
type Runner struct {
	l      *ferry.Launcher
	client *openshell.Client
	cfg    Config
	log    *slog.Logger
	// covered are the secrets the providers keep at the gateway.
	covered map[string]bool
}

// New dials the gateway, opens the session store and returns a Runner
// that starts its runs there. Close ends the gateway connection.
func New(ctx context.Context, cfg Config) (*Runner, error) {
	if cfg.RunsDir == "" {
		return nil, errors.New("rascal: no RunsDir")
	}
	settings := cfg.Gateway
	if settings.Endpoint == "" {
		src := openshell.Sources{}
		if cfg.GatewayName != "" {
			name := cfg.GatewayName
			src.Getenv = func(k string) string {
				switch k {
				case "OPENSHELL_GATEWAY":
					return name
				case "OPENSHELL_GATEWAY_ENDPOINT":
					return ""
				}
				return os.Getenv(k)
			}
		}
		var err error
		if settings, err = openshell.Resolve(src); err != nil {
			return nil, fmt.Errorf("rascal: gateway: %w", err)
		}
	}
	opts := cfg.StoreOptions
	if !strings.HasPrefix(cfg.Store, "s3://") {
		opts.Create = true
	}
	st, err := stores.Open(ctx, cfg.Store, opts)
	if err != nil {
		return nil, fmt.Errorf("rascal: session store: %w", err)
	}
	if len(cfg.Agents) == 0 {
		if cfg.Agents, err = bundle.Embedded(); err != nil {
			return nil, fmt.Errorf("rascal: agent builds: %w", err)
		}
	}
	c, err := openshell.Dial(openshell.Config{Settings: settings})
	if err != nil {
		return nil, fmt.Errorf("rascal: gateway: %w", err)
	}
	r, err := newRunner(c, st, cfg)
	if err != nil {
		c.Close()
		return nil, err
	}
	r.client = c
	return r, nil
}

// newRunner is New over a gateway client and a store.
func newRunner(c *openshell.Client, st *session.Store, cfg Config) (*Runner, error) {
	if len(cfg.Command) == 0 {
		cfg.Command = DefaultCommand
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SandboxEnv == nil {
		cfg.SandboxEnv = DefaultSandboxEnv
	}
	res, err := cfg.Security.resources()
	if err != nil {
		return nil, fmt.Errorf("rascal: %w", err)
	}
	l, err := ferry.NewLauncher(ferry.LauncherConfig{
		Sandboxes: c, X: c, RunsDir: cfg.RunsDir, Store: st, Agents: cfg.Agents, Mode: transfer.ModeAgent,
		Image: cfg.Image, Backend: string(ExecutionBackendDocker), FinishTimeout: cfg.FinishTimeout,
		KillGrace: cfg.KillGrace, Logger: cfg.Logger, AfterSpawn: cfg.AfterSpawn,
		PolicyPath: cfg.PolicyPath, Providers: cfg.Providers, Env: cfg.SandboxEnv, RunIDLabel: RunIDLabel,
		Resources: res,
	})
	if err != nil {
		return nil, fmt.Errorf("rascal: %w", err)
	}
	return &Runner{l: l, cfg: cfg, log: cfg.Logger, covered: Coverage(cfg.Providers, cfg.ProviderTypes)}, nil
}

// Close ends the gateway connection New made. The runs go on.
func (r *Runner) Close() error {
	if r.client == nil {
		return nil
	}
	return r.client.Close()
}

// StartDetached is Rascal's: it lays the spec out (layout.go), writes the
// GitHub token into the secrets directory and the start into runner.log
// as Docker's backend does, and starts the run; the handle is the one
// rascald saved as pending.
func (r *Runner) StartDetached(ctx context.Context, spec Spec) (ExecutionHandle, error) {
	if strings.TrimSpace(spec.RunDir) == "" {
		if strings.TrimSpace(spec.RunID) == "" {
			return ExecutionHandle{}, fmt.Errorf("start detached run: %w", ferry.ErrInvalidRunID)
		}
		spec.RunDir = filepath.Join(r.cfg.RunsDir, spec.RunID)
	}
	if strings.TrimSpace(spec.SecretsDir) == "" {
		spec.SecretsDir = SecretsDir(spec.RunDir)
	}
	rt := NormalizeRuntime(string(spec.AgentRuntime))
	rn := &run{spec: spec, runtime: rt, session: spec.TaskSession.Resume && strings.TrimSpace(spec.TaskSession.TaskDir) != "", covered: r.covered}
	if err := os.MkdirAll(spec.RunDir, 0o755); err != nil {
		return ExecutionHandle{}, fmt.Errorf("create run dir: %w", err)
	}
	if socket := strings.TrimSpace(spec.ResultReportSocketPath); socket != "" {
		if err := planReport(spec.RunDir, spec.RunID, socket); err != nil {
			return ExecutionHandle{}, err
		}
	}
	if tok := strings.TrimSpace(r.cfg.GitHubToken); tok != "" && !r.covered["gh_token"] {
		if err := writeSecret(spec.SecretsDir, "gh_token", tok); err != nil {
			return ExecutionHandle{}, fmt.Errorf("write github token secret: %w", err)
		}
	}
	if fi, err := os.Stat(filepath.Join(spec.SecretsDir, "gh_token")); err == nil && fi.Mode().IsRegular() {
		rn.githubToken = true
	}
	ls := launchSpec(rn)
	ls.Argv = r.cfg.Command
	ls.Diff, ls.DiffFilter = r.cfg.Diff, r.cfg.DiffFilter
	for k, v := range r.cfg.Env {
		_, inEnv := ls.Env[k]
		_, inPath := ls.PathEnv[k]
		if !inEnv && !inPath {
			ls.Env[k] = v
		}
	}
	image := ls.Image
	if image == "" {
		image = r.cfg.Image
	}
	sessionPath := ls.PathEnv["GOOSE_PATH_ROOT"]
	if len(ls.Sessions) > 0 {
		sessionPath = "${WORKSPACE}/" + ls.Sessions[0].Remote
	}
	// The lines Docker's backend writes before docker run; they travel
	// with runner.log into the sandbox and back.
	if err := appendLog(filepath.Join(spec.RunDir, "runner.log"),
		fmt.Sprintf("starting ferry runner image=%s agent_runtime=%s run_id=%s", image, rt, spec.RunID),
		fmt.Sprintf("task session agent_runtime=%s mode=%s resume=%t key=%s session_id=%s path_root=%s",
			rt, NormalizeSessionMode(string(spec.TaskSession.Mode)), spec.TaskSession.Resume,
			strings.TrimSpace(spec.TaskSession.TaskKey), strings.TrimSpace(spec.TaskSession.RuntimeSessionID), sessionPath),
	); err != nil {
		return ExecutionHandle{}, err
	}
	h, err := r.l.StartDetached(ctx, ls)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return ExecutionHandle{}, context.Canceled
		}
		return ExecutionHandle{}, fmt.Errorf("start detached ferry runner: %w", err)
	}
	return handleOf(h), nil
}

// Inspect is Rascal's: Running until the command has ended and its
// artifacts (meta.json first) are in the run directory and its session is
// saved; then, the run's result reported on the spec's result socket
// (report.go), the exit code. An unknown handle is ErrExecutionNotFound.
func (r *Runner) Inspect(ctx context.Context, h ExecutionHandle) (ExecutionState, error) {
	st, err := r.l.Inspect(ctx, ferryHandle(h))
	if err != nil {
		return ExecutionState{}, err
	}
	if st.Running {
		return ExecutionState{Running: true}, nil
	}
	r.report(ctx, h)
	code := st.ExitCode
	return ExecutionState{ExitCode: &code}, nil
}

// Stop is Rascal's: SIGTERM, SIGKILL after timeout (5 s when not
// positive); the artifacts and the session are kept. An unknown handle is
// ErrExecutionNotFound.
func (r *Runner) Stop(ctx context.Context, h ExecutionHandle, timeout time.Duration) error {
	if err := r.l.Stop(ctx, ferryHandle(h), timeout); err != nil {
		return err
	}
	r.report(ctx, h)
	return nil
}

// Remove is Rascal's: the sandbox is deleted; one already gone, or an
// unknown handle, is no error.
func (r *Runner) Remove(ctx context.Context, h ExecutionHandle) error {
	return r.l.Remove(ctx, ferryHandle(h))
}

func handleOf(h ferry.Handle) ExecutionHandle {
	return ExecutionHandle{Backend: ExecutionBackend(h.Backend), ID: h.ID, Name: h.Name}
}

func ferryHandle(h ExecutionHandle) ferry.Handle {
	return ferry.Handle{Backend: string(h.Backend), ID: strings.TrimSpace(h.ID), Name: strings.TrimSpace(h.Name)}
}

// writeSecret writes a secret file, 0600 in a 0700 directory, as Docker's
// backend does.
func writeSecret(dir, name, data string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create secret dir: %w", err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		return fmt.Errorf("write secret file %s: %w", p, err)
	}
	return nil
}

// appendLog appends timestamped lines to the run's runner.log.
func appendLog(p string, lines ...string) error {
	f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open runner log: %w", err)
	}
	ts := time.Now().UTC().Format(time.RFC3339)
	for _, l := range lines {
		if _, err := fmt.Fprintf(f, "[%s] %s\n", ts, l); err != nil {
			f.Close()
			return fmt.Errorf("write runner log: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close runner log: %w", err)
	}
	return nil
}

// resources are c's limits as a sandbox's: CPUs and Memory in baseline
// and strict mode, nothing in open mode, as Docker's dockerRunArgs.
func (c DockerSecurityConfig) resources() (openshell.Resources, error) {
	if NormalizeDockerSecurityMode(string(c.Mode)) == DockerSecurityOpen {
		return openshell.Resources{}, nil
	}
	mem, err := dockerMemory(strings.TrimSpace(c.Memory))
	if err != nil {
		return openshell.Resources{}, err
	}
	r := openshell.Resources{CPULimit: strings.TrimSpace(c.CPUs), MemoryLimit: mem}
	if err := r.Check(); err != nil {
		return openshell.Resources{}, fmt.Errorf("security: %w", err)
	}
	return r, nil
}

// dockerMemory is a size in docker run --memory's units (go-units
// RAMInBytes: b, k, m, g, t, p, binary, an optional "b"/"ib") as an
// OpenShell quantity: "4g" is "4Gi", "1.5g" 1610612736 bytes.
func dockerMemory(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	m := dockerMemRE.FindStringSubmatch(v)
	if m == nil {
		return "", fmt.Errorf("security: memory %q: not a docker size such as 4g or 512m", v)
	}
	unit := strings.ToUpper(m[2])
	if !strings.Contains(m[1], ".") {
		if unit == "" {
			return m[1], nil
		}
		return m[1] + unit + "i", nil
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return "", fmt.Errorf("security: memory %q: %w", v, err)
	}
	mult := map[string]float64{"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}[unit]
	return strconv.FormatInt(int64(f*mult), 10), nil
}

var dockerMemRE = regexp.MustCompile(`^(\d+(?:\.\d+)?) ?([kKmMgGtTpP])?[iI]?[bB]?$`)
