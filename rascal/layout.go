package rascal

import (
	"strconv"
	"strings"

	"github.com/ferry-dev/ferry"
)

// This file is the Rascal layout: every input, secret (and the providers
// that cover it), directory, session, variable and label of a run, as
// Rascal's Docker backend has it (internal/runner/docker.go,
// runner/Dockerfile) and as a ferry sandbox has it. Nothing else in the
// package names a Rascal path or variable.
//
// Docker's paths and ferry's, relative to the sandbox's workspace root
// (the placeholders are ferry.ExpandPath's):
//
//	/rascal-meta             ${META}                   the run directory, mounted; ferry uploads the inputs, pulls the artifacts
//	/work                    ${WORK}                   RunDir/workspace, mounted; ferry creates it, empty
//	/run/rascal-secrets      ${SECRETS}                the secrets directory, mounted read-only; ferry uploads 0600 in 0700
//	/rascal-<h>-session      ${WORKSPACE}/rascal-<h>-session   TaskSession.TaskDir, mounted; ferry restores and saves it (session store)
//	/rascal-control          (none)                    the result socket's directory: no socket reaches a remote sandbox; the Runner reports from the host

// kind is what a row of the layout is.
type kind int

const (
	// input: a file or directory of the run directory, uploaded into the
	// meta directory when present.
	input kind = iota
	// secret: a file of the secrets directory, uploaded when present;
	// env, when set, names its sandbox path. A provider of one of the
	// types in providers covers it: then neither the file nor env is in
	// the sandbox, the gateway injects the credential.
	secret
	// dir: a directory created in the sandbox.
	dir
	// sessionDir: the runtime's session directory, restored and saved.
	sessionDir
	// variable: an environment variable, its value as it is.
	variable
	// label: a label of the sandbox, its value made a label value
	// (openshell.LabelValue): Docker's --label.
	label
	// pathVariable: an environment variable whose value is a sandbox path
	// (ferry.ExpandPath's placeholders).
	pathVariable
)

// row is one piece of a run.
type row struct {
	kind kind
	// name is the file (input, secret), the directory (dir, sessionDir)
	// or the variable.
	name string
	// env is a secret's variable.
	env string
	// providers are the provider types (upstream's provider ids) that
	// cover a secret.
	providers []string
	// docker is what Docker has: the mount, path or value. For the
	// reader, and for a test that compares.
	docker string
	// value is a variable's value, or the sandbox path of a secret's env.
	value func(r *run) string
	// when says whether the row applies to the run; nil always.
	when func(r *run) bool
}

// run is what the rows decide on.
type run struct {
	spec    Spec
	runtime Runtime
	// session: the task's session is resumed (TaskSession.Resume with a
	// TaskDir, as newDockerRuntimeLayout decides).
	session bool
	// githubToken: a GitHub token is configured (or in the secrets
	// directory already).
	githubToken bool
	// covered are the secrets a provider covers (Coverage).
	covered map[string]bool
}

func lit(v string) func(*run) string { return func(*run) string { return v } }

func goose(r *run) bool  { return r.runtime.Harness() == HarnessGoose }
func claude(r *run) bool { return r.runtime == RuntimeClaude || r.runtime == RuntimeGooseClaude }

// layout is the table.
var layout = []row{
	// The orchestrator's inputs in the run directory (WriteRunFiles).
	{kind: input, name: "instructions.md", docker: "/rascal-meta/instructions.md"},
	{kind: input, name: "context.json", docker: "/rascal-meta/context.json"},
	{kind: input, name: "persistent_instructions.md", docker: "/rascal-meta/persistent_instructions.md"},
	{kind: input, name: "runner.log", docker: "/rascal-meta/runner.log"},
	// codex/ and claude/ hold the agent's credential when there is no
	// secrets directory (credentials.AuthPath): they travel as inputs.
	{kind: input, name: "codex", docker: "/rascal-meta/codex"},
	{kind: input, name: "claude", docker: "/rascal-meta/claude"},

	// The secrets, and the variables that point at them. Docker sets the
	// provider's variable whether or not its file is there.
	// A provider that covers one (upstream's provider ids and the
	// variables they inject: github GITHUB_TOKEN/GH_TOKEN, claude-code and
	// anthropic ANTHROPIC_API_KEY, codex and openai OPENAI_API_KEY) keeps
	// it at the gateway.
	{kind: secret, name: "gh_token", env: "GH_TOKEN_FILE", docker: "/run/rascal-secrets/gh_token", value: lit("${SECRETS}/gh_token"),
		providers: []string{"github"},
		when:      func(r *run) bool { return r.githubToken }},
	{kind: secret, name: "codex_auth.json", env: "CODEX_AUTH_FILE", docker: "/run/rascal-secrets/codex_auth.json", value: lit("${SECRETS}/codex_auth.json"),
		providers: []string{"codex", "openai"},
		when:      func(r *run) bool { return r.runtime.Provider() != ModelProviderAnthropic }},
	{kind: secret, name: "claude_oauth_token", env: "CLAUDE_CODE_OAUTH_TOKEN_FILE", docker: "/run/rascal-secrets/claude_oauth_token", value: lit("${SECRETS}/claude_oauth_token"),
		providers: []string{"claude-code", "claude", "anthropic"},
		when:      func(r *run) bool { return r.runtime.Provider() == ModelProviderAnthropic }},

	// Docker's --label, in its order (RunIDLabel says which run a sandbox
	// is for).
	{kind: label, name: RunIDLabel, value: func(r *run) string { return r.spec.RunID }},
	{kind: label, name: "rascal.task_id", value: func(r *run) string { return r.spec.TaskID }},
	{kind: label, name: "rascal.repo", value: func(r *run) string { return r.spec.Repo }},

	// The image's WORKDIR and mount.
	{kind: dir, name: ferry.WorkRemote, docker: "/work"},

	// The task's session, when resumed.
	{kind: sessionDir, name: "rascal-codex-session", docker: "/rascal-codex-session",
		when: func(r *run) bool { return r.session && r.runtime == RuntimeCodex }},
	{kind: sessionDir, name: "rascal-claude-session", docker: "/rascal-claude-session",
		when: func(r *run) bool { return r.session && r.runtime == RuntimeClaude }},
	{kind: sessionDir, name: "rascal-goose-session", docker: "/rascal-goose-session",
		when: func(r *run) bool { return r.session && goose(r) }},

	// docker.go's variables, in its order.
	{kind: variable, name: "RASCAL_RUN_ID", value: func(r *run) string { return r.spec.RunID }},
	{kind: variable, name: "RASCAL_TASK_ID", value: func(r *run) string { return r.spec.TaskID }},
	{kind: variable, name: "RASCAL_INSTRUCTION", value: func(r *run) string { return r.spec.Instruction }},
	{kind: variable, name: "RASCAL_REPO", value: func(r *run) string { return r.spec.Repo }},
	{kind: variable, name: "RASCAL_AGENT_RUNTIME", value: func(r *run) string { return r.runtime.String() }},
	{kind: variable, name: "RASCAL_BASE_BRANCH", value: func(r *run) string { return r.spec.BaseBranch }},
	{kind: variable, name: "RASCAL_HEAD_BRANCH", value: func(r *run) string { return r.spec.HeadBranch }},
	{kind: variable, name: "RASCAL_TRIGGER", value: func(r *run) string { return r.spec.Trigger.String() }},
	{kind: variable, name: "RASCAL_GOOSE_DEBUG", value: func(r *run) string { return strconv.FormatBool(r.spec.Debug) }},
	{kind: variable, name: "RASCAL_CONTEXT", value: func(r *run) string { return r.spec.Context }},
	{kind: pathVariable, name: "RASCAL_CONTEXT_JSON", docker: "/rascal-meta/context.json", value: lit("${META}/context.json")},
	{kind: variable, name: "RASCAL_ISSUE_NUMBER", value: func(r *run) string { return strconv.Itoa(r.spec.IssueNumber) }},
	{kind: variable, name: "RASCAL_PR_NUMBER", value: func(r *run) string { return strconv.Itoa(r.spec.PRNumber) }},
	{kind: variable, name: "RASCAL_TASK_SESSION_MODE", value: func(r *run) string { return string(r.spec.TaskSession.Mode) }},
	{kind: variable, name: "RASCAL_TASK_SESSION_RESUME", value: func(r *run) string { return strconv.FormatBool(r.spec.TaskSession.Resume) }},
	{kind: variable, name: "RASCAL_TASK_SESSION_KEY", value: func(r *run) string { return strings.TrimSpace(r.spec.TaskSession.TaskKey) }},
	{kind: variable, name: "RASCAL_TASK_SESSION_ID", value: func(r *run) string { return strings.TrimSpace(r.spec.TaskSession.RuntimeSessionID) }},
	{kind: pathVariable, name: "CODEX_HOME", docker: "/rascal-meta/codex, or /rascal-codex-session when resumed", value: func(r *run) string {
		if r.session && r.runtime == RuntimeCodex {
			return "${WORKSPACE}/rascal-codex-session"
		}
		return "${META}/codex"
	}},
	{kind: variable, name: "GH_PROMPT_DISABLED", value: lit("1")},
	{kind: variable, name: "GIT_TERMINAL_PROMPT", value: lit("0")},
	// RASCAL_RUN_RESULT_SOCKET is not set: Docker mounts the socket's
	// directory at /rascal-control, and no Unix socket of the host
	// reaches a remote sandbox (without the variable the worker does not
	// spend 10 s of retries on a dead socket). The Runner reports
	// meta.json's result on the socket for it, from the host (report.go).
	{kind: pathVariable, name: "GOOSE_PATH_ROOT", docker: "/rascal-meta/goose, or /rascal-goose-session when resumed", when: goose, value: func(r *run) string {
		if r.session {
			return "${WORKSPACE}/rascal-goose-session"
		}
		return "${META}/goose"
	}},
	{kind: pathVariable, name: "GOOSE_MOIM_MESSAGE_FILE", docker: "/rascal-meta/persistent_instructions.md", when: goose, value: lit("${META}/persistent_instructions.md")},
	{kind: variable, name: "GOOSE_MODE", when: goose, value: lit("auto")},
	{kind: variable, name: "GOOSE_DISABLE_KEYRING", when: goose, value: lit("1")},
	{kind: variable, name: "GOOSE_DISABLE_SESSION_NAMING", when: goose, value: lit("true")},
	{kind: variable, name: "GOOSE_CONTEXT_STRATEGY", when: goose, value: lit("summarize")},
	{kind: variable, name: "GOOSE_PROVIDER", when: goose, value: func(r *run) string {
		if r.runtime == RuntimeGooseClaude {
			return "claude-code"
		}
		return "codex"
	}},
	{kind: variable, name: "GOOSE_MODEL", when: goose, value: func(r *run) string {
		if r.runtime == RuntimeGooseClaude {
			return "claude-sonnet-4-5"
		}
		return "gpt-5.4"
	}},
	{kind: pathVariable, name: "CLAUDE_CONFIG_DIR", docker: "/rascal-meta/claude, or /rascal-claude-session when claude resumes", when: claude, value: func(r *run) string {
		if r.session && r.runtime == RuntimeClaude {
			return "${WORKSPACE}/rascal-claude-session"
		}
		return "${META}/claude"
	}},
	// GH_TOKEN (Docker's AllowEnvSecrets) is never set: ferry keeps a
	// command's environment in the sandbox's state directory, so the
	// token always travels as the gh_token secret.

	// The goose images' ENV (runner/Dockerfile) that docker.go leaves to
	// the image: a sandbox image that is not Rascal's lacks them.
	{kind: variable, name: "GOOSE_MAX_TURNS", when: goose, value: lit("100")},
	{kind: variable, name: "GOOSE_AUTO_COMPACT_THRESHOLD", when: goose, value: lit("0.0")},

	// ferry's own: the worker's defaults are Docker's absolute paths
	// (internal/worker/config.go), which a sandbox does not have.
	{kind: pathVariable, name: "RASCAL_META_DIR", docker: "(unset: the worker's default /rascal-meta)", value: lit("${META}")},
	{kind: pathVariable, name: "RASCAL_WORK_ROOT", docker: "(unset: the worker's default /work)", value: lit("${WORK}")},
	{kind: pathVariable, name: "RASCAL_REPO_DIR", docker: "(unset: the worker's default /work/repo)", value: lit("${WORK}/repo")},
}

// RunIDLabel is the label that names a sandbox's run, Docker's
// rascal.run_id: a sandbox of a run's name without it, or another run's,
// is refused.
const RunIDLabel = "rascal.run_id"

// DefaultSandboxEnv is Config.SandboxEnv's default: the design's static
// environment, which Docker's backend also sets per run. Nothing in it
// is a secret.
var DefaultSandboxEnv = map[string]string{"GIT_TERMINAL_PROMPT": "0", "GH_PROMPT_DISABLED": "1"}

// Coverage is the secrets that the providers cover, by the provider's
// type: types maps a provider's name to its type (upstream's provider
// id: github, claude-code, anthropic, codex, openai); a name types does
// not hold is its own type, as `openshell sandbox create -- claude`
// names the provider it creates.
func Coverage(providers []string, types map[string]string) map[string]bool {
	have := map[string]bool{}
	for _, p := range providers {
		t := p
		if v, ok := types[p]; ok {
			t = v
		}
		have[strings.ToLower(strings.TrimSpace(t))] = true
	}
	out := map[string]bool{}
	for _, w := range layout {
		if w.kind != secret {
			continue
		}
		for _, t := range w.providers {
			if have[t] {
				out[w.name] = true
			}
		}
	}
	return out
}

// DefaultCommand is the image's entrypoint, runner/entrypoint.sh's
// `exec rascal-runner >>/rascal-meta/runner.log 2>&1`: the Launcher
// appends the command's output to the meta directory's runner.log.
var DefaultCommand = []string{"rascal-runner"}

// Workdir is the image's WORKDIR, /work.
const Workdir = ferry.WorkRemote

// launchSpec is spec laid out for the Launcher.
func launchSpec(r *run) ferry.LaunchSpec {
	ls := ferry.LaunchSpec{
		RunID: r.spec.RunID, RunDir: r.spec.RunDir, SecretsDir: r.spec.SecretsDir, Image: r.spec.RunnerImage,
		Workdir: Workdir, Env: map[string]string{}, PathEnv: map[string]string{}, Labels: map[string]string{},
	}
	key := strings.TrimSpace(r.spec.TaskSession.TaskKey)
	if key == "" {
		key = TaskSessionKey(r.spec.Repo, r.spec.TaskID)
	}
	for _, w := range layout {
		if w.kind == secret && r.covered[w.name] {
			// At the gateway: neither the file nor its variable.
			continue
		}
		if w.when != nil && !w.when(r) {
			if w.kind == secret {
				// The file still travels if it is there: its variable
				// is what Docker leaves out.
				ls.Secrets = append(ls.Secrets, w.name)
			}
			continue
		}
		switch w.kind {
		case input:
			ls.Inputs = append(ls.Inputs, w.name)
		case secret:
			ls.Secrets = append(ls.Secrets, w.name)
			ls.PathEnv[w.env] = w.value(r)
		case dir:
			ls.Dirs = append(ls.Dirs, w.name)
		case sessionDir:
			ls.Sessions = append(ls.Sessions, ferry.SessionMapping{Key: key, Remote: w.name})
		case variable:
			ls.Env[w.name] = w.value(r)
		case label:
			ls.Labels[w.name] = w.value(r)
		case pathVariable:
			ls.PathEnv[w.name] = w.value(r)
		}
	}
	return ls
}
