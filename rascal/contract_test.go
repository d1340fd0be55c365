package rascal_test

import (
	"context"
	"errors"
	"time"

	ferryrascal "github.com/ferry-dev/ferry/rascal"
)

// What follows is declared as Rascal's source declares it (rtzll/rascal
// 5025f84: internal/runner/runner.go, internal/runtime/agent.go,
// internal/runtrigger/name.go, internal/runner/meta.go), so that the test drives the Runner through
// Rascal's own interface, and the adapter below is the one Rascal would
// carry.

type Runtime string          // runtime.Runtime
type SessionMode string      // runtime.SessionMode
type Name string             // runtrigger.Name
type ExecutionBackend string // runner.ExecutionBackend

const ExecutionBackendDocker ExecutionBackend = "docker"

// RunResult is runner.RunResult, what rascald's result socket takes.
type RunResult struct {
	RunID         string `json:"run_id"`
	PRNumber      int    `json:"pr_number"`
	PRURL         string `json:"pr_url,omitempty"`
	HeadSHA       string `json:"head_sha,omitempty"`
	TaskSessionID string `json:"task_session_id,omitempty"`
	ExitCode      int    `json:"exit_code"`
	Error         string `json:"error,omitempty"`
}

// RunResultReportResponse is runner.RunResultReportResponse.
type RunResultReportResponse struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Spec is runner.Spec.
type Spec struct {
	RunID                  string
	TaskID                 string
	Repo                   string
	Instruction            string
	AgentRuntime           Runtime
	RunnerImage            string
	BaseBranch             string
	HeadBranch             string
	Trigger                Name
	Debug                  bool
	RunDir                 string
	SecretsDir             string
	IssueNumber            int
	PRNumber               int
	Context                string
	ResultReportSocketPath string
	TaskSession            TaskSessionSpec
}

// TaskSessionSpec is runner.TaskSessionSpec.
type TaskSessionSpec struct {
	Mode             SessionMode
	Resume           bool
	TaskDir          string
	TaskKey          string
	RuntimeSessionID string
}

// ExecutionHandle is runner.ExecutionHandle.
type ExecutionHandle struct {
	Backend ExecutionBackend
	ID      string
	Name    string
}

// ExecutionState is runner.ExecutionState.
type ExecutionState struct {
	Running  bool
	ExitCode *int
}

// ErrExecutionNotFound is runner.ErrExecutionNotFound.
var ErrExecutionNotFound = errors.New("execution handle not found")

// Runner is runner.Runner.
type Runner interface {
	StartDetached(ctx context.Context, spec Spec) (ExecutionHandle, error)
	Inspect(ctx context.Context, handle ExecutionHandle) (ExecutionState, error)
	Stop(ctx context.Context, handle ExecutionHandle, timeout time.Duration) error
	Remove(ctx context.Context, handle ExecutionHandle) error
}

// --- the adapter, as in README.md ("Using ferry from Rascal") ---

// FerryRunner is Rascal's runner.Runner over ferry: type conversion only.
type FerryRunner struct{ R *ferryrascal.Runner }

func (f FerryRunner) StartDetached(ctx context.Context, s Spec) (ExecutionHandle, error) {
	ts := s.TaskSession
	h, err := f.R.StartDetached(ctx, ferryrascal.Spec{
		RunID: s.RunID, TaskID: s.TaskID, Repo: s.Repo, Instruction: s.Instruction,
		AgentRuntime: ferryrascal.Runtime(s.AgentRuntime), RunnerImage: s.RunnerImage,
		BaseBranch: s.BaseBranch, HeadBranch: s.HeadBranch, Trigger: ferryrascal.TriggerName(s.Trigger),
		Debug: s.Debug, RunDir: s.RunDir, SecretsDir: s.SecretsDir, IssueNumber: s.IssueNumber,
		PRNumber: s.PRNumber, Context: s.Context, ResultReportSocketPath: s.ResultReportSocketPath,
		TaskSession: ferryrascal.TaskSessionSpec{Mode: ferryrascal.SessionMode(ts.Mode), Resume: ts.Resume,
			TaskDir: ts.TaskDir, TaskKey: ts.TaskKey, RuntimeSessionID: ts.RuntimeSessionID},
	})
	return ExecutionHandle{Backend: ExecutionBackend(h.Backend), ID: h.ID, Name: h.Name}, notFound(err)
}

func (f FerryRunner) Inspect(ctx context.Context, h ExecutionHandle) (ExecutionState, error) {
	st, err := f.R.Inspect(ctx, handle(h))
	return ExecutionState(st), notFound(err)
}

func (f FerryRunner) Stop(ctx context.Context, h ExecutionHandle, timeout time.Duration) error {
	return notFound(f.R.Stop(ctx, handle(h), timeout))
}

func (f FerryRunner) Remove(ctx context.Context, h ExecutionHandle) error {
	return notFound(f.R.Remove(ctx, handle(h)))
}

func handle(h ExecutionHandle) ferryrascal.ExecutionHandle {
	return ferryrascal.ExecutionHandle{Backend: ferryrascal.ExecutionBackend(h.Backend), ID: h.ID, Name: h.Name}
}

func notFound(err error) error {
	if errors.Is(err, ferryrascal.ErrExecutionNotFound) {
		return ErrExecutionNotFound
	}
	return err
}

// --- end of the adapter ---

var _ Runner = FerryRunner{}
