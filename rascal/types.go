package rascal

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ferry-dev/ferry"
)

// The types below are Rascal's (github.com/rtzll/rascal, internal/runner,
// internal/runtime and internal/runtrigger at 5025f84), field for field
// and value for value, so that Rascal's adapter converts and copies and
// decides nothing. The functions that decide something (NormalizeRuntime,
// SessionEnabled, TaskSessionKey...) decide it as Rascal's do.

// Spec is Rascal's runner.Spec: the input of one run.
type Spec struct {
	RunID                  string
	TaskID                 string
	Repo                   string
	Instruction            string
	AgentRuntime           Runtime
	RunnerImage            string
	BaseBranch             string
	HeadBranch             string
	Trigger                TriggerName
	Debug                  bool
	RunDir                 string
	SecretsDir             string
	IssueNumber            int
	PRNumber               int
	Context                string
	ResultReportSocketPath string
	TaskSession            TaskSessionSpec
}

// TaskSessionSpec is Rascal's runner.TaskSessionSpec.
type TaskSessionSpec struct {
	Mode             SessionMode
	Resume           bool
	TaskDir          string
	TaskKey          string
	RuntimeSessionID string
}

// ExecutionBackend is Rascal's runner.ExecutionBackend.
type ExecutionBackend string

// Rascal's backends. A Runner's handles say BackendDocker: rascald stores
// every backend but noop as docker, and its pending handle is a docker
// one.
const (
	ExecutionBackendDocker ExecutionBackend = "docker"
	ExecutionBackendNoop   ExecutionBackend = "noop"
)

// ExecutionHandle is Rascal's runner.ExecutionHandle. A Runner's ID and
// Name are both the handle name, sanitizeContainerName("rascal-"+RunID),
// as in the pending handle rascald saves before the start.
type ExecutionHandle struct {
	Backend ExecutionBackend
	ID      string
	Name    string
}

// ExecutionState is Rascal's runner.ExecutionState: ExitCode is nil while
// Running.
type ExecutionState struct {
	Running  bool
	ExitCode *int
}

// ErrExecutionNotFound is Rascal's runner.ErrExecutionNotFound: no run
// answers to the handle. It is ferry.ErrUnknownRun itself, the one error
// the Launcher has for an unknown handle, so the adapter maps one to one.
var ErrExecutionNotFound = ferry.ErrUnknownRun

// ExecutionHandleForRun is Rascal's runner.ExecutionHandleForRun: the
// handle rascald saves as pending before StartDetached (its ID empty; it
// stores Name as the ID too).
func ExecutionHandleForRun(runID string) ExecutionHandle {
	name := sanitizeContainerName("rascal-" + strings.TrimSpace(runID))
	return ExecutionHandle{Backend: ExecutionBackendDocker, Name: name}
}

// sanitizeContainerName is Rascal's (internal/runner/docker.go).
func sanitizeContainerName(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-' || r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-_")
	if out == "" {
		out = "rascal-run"
	}
	if len(out) > 63 {
		return out[:63]
	}
	return out
}

// SecretsDir is Rascal's runner.SecretsDir: .<base>-secrets beside the
// run directory.
func SecretsDir(runDir string) string {
	runDir = strings.TrimSpace(runDir)
	if runDir == "" {
		return ""
	}
	return ferry.SecretsDir(runDir)
}

// Runtime is Rascal's runtime.Runtime.
type Runtime string

// Rascal's runtimes.
const (
	RuntimeGooseCodex  Runtime = "goose-codex"
	RuntimeCodex       Runtime = "codex"
	RuntimeClaude      Runtime = "claude"
	RuntimeGooseClaude Runtime = "goose-claude"
)

// Runtimes are Rascal's runtimes, in its order.
var Runtimes = []Runtime{RuntimeGooseCodex, RuntimeCodex, RuntimeClaude, RuntimeGooseClaude}

// ParseRuntime is Rascal's runtime.ParseRuntime: "" and "goose" are
// goose-codex.
func ParseRuntime(raw string) (Runtime, error) {
	switch strings.ToLower(strings.TrimSpace(raw)) {
	case "", string(RuntimeGooseCodex), "goose":
		return RuntimeGooseCodex, nil
	case string(RuntimeCodex):
		return RuntimeCodex, nil
	case string(RuntimeClaude):
		return RuntimeClaude, nil
	case string(RuntimeGooseClaude):
		return RuntimeGooseClaude, nil
	default:
		return "", fmt.Errorf("unknown agent runtime %q", raw)
	}
}

// NormalizeRuntime is Rascal's: an unknown runtime is goose-codex.
func NormalizeRuntime(raw string) Runtime {
	r, err := ParseRuntime(raw)
	if err != nil {
		return RuntimeGooseCodex
	}
	return r
}

func (r Runtime) String() string { return string(NormalizeRuntime(string(r))) }

// Harness is Rascal's runtime.Harness.
type Harness string

// Rascal's harnesses.
const (
	HarnessGoose  Harness = "goose"
	HarnessDirect Harness = "direct"
)

// Harness says whether r runs under goose or directly.
func (r Runtime) Harness() Harness {
	switch NormalizeRuntime(string(r)) {
	case RuntimeGooseCodex, RuntimeGooseClaude:
		return HarnessGoose
	default:
		return HarnessDirect
	}
}

// ModelProvider is Rascal's runtime.ModelProvider.
type ModelProvider string

// Rascal's model providers.
const (
	ModelProviderCodex     ModelProvider = "codex"
	ModelProviderGemini    ModelProvider = "gemini"
	ModelProviderAnthropic ModelProvider = "anthropic"
)

// Provider is r's model provider.
func (r Runtime) Provider() ModelProvider {
	switch NormalizeRuntime(string(r)) {
	case RuntimeClaude, RuntimeGooseClaude:
		return ModelProviderAnthropic
	default:
		return ModelProviderCodex
	}
}

// SessionMode is Rascal's runtime.SessionMode.
type SessionMode string

// Rascal's task session modes.
const (
	SessionModeOff    SessionMode = "off"
	SessionModePROnly SessionMode = "pr-only"
	SessionModeAll    SessionMode = "all"
)

// SessionModes are Rascal's session modes.
var SessionModes = []SessionMode{SessionModeOff, SessionModePROnly, SessionModeAll}

// ParseSessionMode is Rascal's: "" is off.
func ParseSessionMode(raw string) (SessionMode, error) {
	switch strings.ToLower(strings.TrimSpace(raw)) {
	case "", string(SessionModeOff):
		return SessionModeOff, nil
	case string(SessionModePROnly):
		return SessionModePROnly, nil
	case string(SessionModeAll):
		return SessionModeAll, nil
	default:
		return "", fmt.Errorf("unknown agent session mode %q", raw)
	}
}

// NormalizeSessionMode is Rascal's: an unknown mode is off.
func NormalizeSessionMode(raw string) SessionMode {
	m, err := ParseSessionMode(raw)
	if err != nil {
		return SessionModeOff
	}
	return m
}

// SessionEnabled is Rascal's runtime.SessionEnabled, which rascald makes
// TaskSession.Resume: always in mode all, for the PR triggers (and retry,
// issue_edited) in pr-only, never in off.
func SessionEnabled(mode SessionMode, trigger TriggerName) bool {
	switch NormalizeSessionMode(string(mode)) {
	case SessionModeAll:
		return true
	case SessionModePROnly:
		return trigger.EnablesPROnlySession()
	default:
		return false
	}
}

// TriggerName is Rascal's runtrigger.Name.
type TriggerName string

// Rascal's triggers.
const (
	TriggerCLI             TriggerName = "cli"
	TriggerRetry           TriggerName = "retry"
	TriggerIssueAPI        TriggerName = "issue_api"
	TriggerIssueLabel      TriggerName = "issue_label"
	TriggerIssueEdited     TriggerName = "issue_edited"
	TriggerIssueReopened   TriggerName = "issue_reopened"
	TriggerPRComment       TriggerName = "pr_comment"
	TriggerPRSynchronize   TriggerName = "pr_synchronize"
	TriggerPRReview        TriggerName = "pr_review"
	TriggerPRReviewComment TriggerName = "pr_review_comment"
	TriggerPRReviewThread  TriggerName = "pr_review_thread"
	TriggerPRCheckFailure  TriggerName = "pr_check_failure"
)

func (n TriggerName) String() string { return string(n) }

// EnablesPROnlySession is Rascal's: the triggers that resume a session in
// mode pr-only.
func (n TriggerName) EnablesPROnlySession() bool {
	switch TriggerName(strings.ToLower(strings.TrimSpace(string(n)))) {
	case TriggerPRComment, TriggerPRSynchronize, TriggerPRReview, TriggerPRReviewComment, TriggerPRReviewThread, TriggerPRCheckFailure, TriggerRetry, TriggerIssueEdited:
		return true
	default:
		return false
	}
}

// TaskSessionKey is Rascal's runtime.TaskSessionKey: the task's session
// directory name, and ferry's session key (session.TaskKey is the same).
func TaskSessionKey(repo, taskID string) string {
	const maxBaseLen = 45
	raw := strings.TrimSpace(repo) + "::" + strings.TrimSpace(taskID)
	sum := sha256.Sum256([]byte(raw))
	hash := hex.EncodeToString(sum[:])[:10]
	base := sanitizeSessionSlug(strings.ToLower(strings.TrimSpace(repo) + "-" + strings.TrimSpace(taskID)))
	if base == "" {
		base = "task"
	}
	if len(base) > maxBaseLen {
		base = strings.Trim(base[:maxBaseLen], "-")
		if base == "" {
			base = "task"
		}
	}
	return base + "-" + hash
}

func sanitizeSessionSlug(in string) string {
	var b strings.Builder
	prevDash := false
	for _, r := range in {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
			prevDash = false
		default:
			if !prevDash {
				b.WriteByte('-')
				prevDash = true
			}
		}
	}
	return strings.Trim(b.String(), "-")
}

// TaskSessionName is Rascal's runner.TaskSessionName: the goose session
// name rascald gives RuntimeSessionID when it has none.
func TaskSessionName(repo, taskID string) string {
	return "rascal-" + TaskSessionKey(repo, taskID)
}

// DockerSecurityMode is Rascal's runner.DockerSecurityMode.
type DockerSecurityMode string

// Rascal's Docker security modes; "" is baseline.
const (
	DockerSecurityOpen     DockerSecurityMode = "open"
	DockerSecurityBaseline DockerSecurityMode = "baseline"
	DockerSecurityStrict   DockerSecurityMode = "strict"
)

// NormalizeDockerSecurityMode is Rascal's: an unknown or empty mode is
// baseline.
func NormalizeDockerSecurityMode(raw string) DockerSecurityMode {
	switch DockerSecurityMode(strings.ToLower(strings.TrimSpace(raw))) {
	case DockerSecurityOpen:
		return DockerSecurityOpen
	case DockerSecurityStrict:
		return DockerSecurityStrict
	}
	return DockerSecurityBaseline
}

// DockerSecurityConfig is Rascal's runner.DockerSecurityConfig, field for
// field. Only CPUs and Memory become something in a sandbox
// (Config.Security); README.md, "What each Docker feature becomes", says
// what becomes of the rest.
type DockerSecurityConfig struct {
	Mode            DockerSecurityMode
	CPUs            string
	Memory          string
	PidsLimit       int
	TmpfsTmpSize    string
	AllowEnvSecrets bool
}

// Meta is Rascal's runner.Meta: meta.json as the worker writes it.
type Meta struct {
	RunID         string `json:"run_id"`
	TaskID        string `json:"task_id"`
	Repo          string `json:"repo"`
	BaseBranch    string `json:"base_branch"`
	HeadBranch    string `json:"head_branch"`
	BuildCommit   string `json:"build_commit,omitempty"`
	PRNumber      int    `json:"pr_number"`
	PRURL         string `json:"pr_url"`
	HeadSHA       string `json:"head_sha"`
	TaskSessionID string `json:"task_session_id,omitempty"`
	ExitCode      int    `json:"exit_code"`
	Error         string `json:"error,omitempty"`
}

// UnmarshalJSON is Rascal's: an older worker's agent_session_id stands
// in for task_session_id.
func (m *Meta) UnmarshalJSON(data []byte) error {
	type meta Meta
	aux := struct {
		meta
		AgentSessionID string `json:"agent_session_id"`
	}{}
	if err := json.Unmarshal(data, &aux); err != nil {
		return fmt.Errorf("decode runner meta: %w", err)
	}
	*m = Meta(aux.meta)
	if m.TaskSessionID == "" {
		m.TaskSessionID = aux.AgentSessionID
	}
	return nil
}

// RunResult is Rascal's runner.RunResult: what the worker reports on the
// result socket.
type RunResult struct {
	RunID         string `json:"run_id"`
	PRNumber      int    `json:"pr_number"`
	PRURL         string `json:"pr_url,omitempty"`
	HeadSHA       string `json:"head_sha,omitempty"`
	TaskSessionID string `json:"task_session_id,omitempty"`
	ExitCode      int    `json:"exit_code"`
	Error         string `json:"error,omitempty"`
}

// RunResult is Rascal's Meta.RunResult.
func (m Meta) RunResult() RunResult {
	return RunResult{
		RunID: m.RunID, PRNumber: m.PRNumber, PRURL: m.PRURL, HeadSHA: m.HeadSHA,
		TaskSessionID: m.TaskSessionID, ExitCode: m.ExitCode, Error: m.Error,
	}
}

// RunResultReportResponse is Rascal's: the orchestrator's answer to a
// report.
type RunResultReportResponse struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}
