package agent

import (
	"context"
	"fmt"
	"time"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
)

// RunState is where a supervised command is.
type RunState int

const (
	// RunMissing: the state directory holds no command.
	RunMissing RunState = iota
	// RunStarting: the command is about to start.
	RunStarting
	// RunRunning: the command runs.
	RunRunning
	// RunExited: the command has ended; its exit status is recorded.
	RunExited
	// RunLost: the supervisor is gone without recording an exit status.
	RunLost
)

func (s RunState) String() string {
	switch s {
	case RunMissing:
		return "missing"
	case RunStarting:
		return "starting"
	case RunRunning:
		return "running"
	case RunExited:
		return "exited"
	case RunLost:
		return "lost"
	}
	return fmt.Sprintf("RunState(%d)", int(s))
}

// RunStatus is what the agent reports about a supervised command. The
// agent is not trusted: these are its claims.
type RunStatus struct {
	State RunState
	RunID string
	// Pid is the command's, and its process group's.
	Pid int
	// ExitCode is set when Exited: the command's, 128+signal, or
	// ExitTimeout.
	ExitCode int
	TimedOut bool
	Started  time.Time
	Ended    time.Time
	// Error says why the command could not be started.
	Error string
}

func runStatusOf(st *agentv1.RunStatus) RunStatus {
	r := RunStatus{
		State: RunState(st.GetState()), RunID: st.GetRunId(), Pid: int(st.GetPid()),
		ExitCode: int(st.GetExitCode()), TimedOut: st.GetTimedOut(), Error: st.GetError(),
	}
	if r.State > RunLost || r.State < RunMissing {
		r.State = RunLost
	}
	if ms := st.GetStartedUnixMs(); ms > 0 {
		r.Started = time.UnixMilli(ms)
	}
	if ms := st.GetEndedUnixMs(); ms > 0 {
		r.Ended = time.UnixMilli(ms)
	}
	return r
}

// SpawnSpec is a command for Spawn. Paths without a leading "/" are
// relative to the sandbox's workspace root.
type SpawnSpec struct {
	// StateDir is where the supervisor keeps what it knows; one command
	// per state directory.
	StateDir string
	// RunID names the command: a second Spawn of the same RunID into the
	// same StateDir starts nothing, another RunID is refused.
	RunID string
	Argv  []string
	// Env is added to the sandbox's environment. It is written to the
	// state directory: never put secrets here.
	Env     map[string]string
	Workdir string
	// Log receives the command's stdout and stderr, appended; empty is a
	// file in StateDir.
	Log string
	// Timeout, when positive, ends the command with SIGTERM, then SIGKILL
	// after KillGrace (default 10s), and exit code ExitTimeout.
	Timeout   time.Duration
	KillGrace time.Duration
}

// Spawn starts spec's command detached, under a supervisor that survives
// this connection, the exec under it and the host. It is idempotent per
// StateDir: when the state directory already holds spec.RunID, it starts
// nothing and reports that command, with spawned false.
func (c *Client) Spawn(ctx context.Context, spec SpawnSpec) (st RunStatus, spawned bool, err error) {
	resp, err := c.sup.Spawn(ctx, &agentv1.SpawnRequest{
		StateDir: spec.StateDir, RunId: spec.RunID, Argv: spec.Argv, Env: spec.Env,
		Workdir: spec.Workdir, Log: spec.Log,
		TimeoutMs: spec.Timeout.Milliseconds(), KillGraceMs: spec.KillGrace.Milliseconds(),
	})
	if err != nil {
		return RunStatus{}, false, c.callErr("spawn", err)
	}
	return runStatusOf(resp.GetStatus()), resp.GetSpawned(), nil
}

// RunStatus reports the supervised command of stateDir; a state directory
// without one is RunMissing.
func (c *Client) RunStatus(ctx context.Context, stateDir string) (RunStatus, error) {
	st, err := c.sup.Status(ctx, &agentv1.StatusRequest{StateDir: stateDir})
	if err != nil {
		return RunStatus{}, c.callErr("status", err)
	}
	return runStatusOf(st), nil
}

// Signal sends SIGTERM (or SIGKILL with kill) to the process group of
// stateDir's command; a command not started yet never starts. A command
// that has exited is left alone. It returns the status before the signal.
func (c *Client) Signal(ctx context.Context, stateDir string, kill bool) (RunStatus, error) {
	sig := agentv1.Signal_SIGNAL_TERM
	if kill {
		sig = agentv1.Signal_SIGNAL_KILL
	}
	st, err := c.sup.Signal(ctx, &agentv1.SignalRequest{StateDir: stateDir, Signal: sig})
	if err != nil {
		return RunStatus{}, c.callErr("signal", err)
	}
	return runStatusOf(st), nil
}
