package rascal

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// dockerEnv is Rascal's dockerContainerEnvBuilder.Build with
// newDockerRuntimeLayout (internal/runner/docker.go at 5025f84), copied
// as it is but for the types: what Docker's backend sets.
func dockerEnv(spec Spec, githubToken string, allowEnvSecrets bool) map[string]string {
	const (
		containerGooseStateDir    = "/rascal-meta/goose"
		containerCodexStateDir    = "/rascal-meta/codex"
		containerGooseSessionDir  = "/rascal-goose-session"
		containerCodexSessionDir  = "/rascal-codex-session"
		containerClaudeStateDir   = "/rascal-meta/claude"
		containerClaudeSessionDir = "/rascal-claude-session"
		containerContextJSONPath  = "/rascal-meta/context.json"
		containerGooseMOIMPath    = "/rascal-meta/persistent_instructions.md"
		containerControlDir       = "/rascal-control"
		containerGitHubTokenFile  = "/run/rascal-secrets/gh_token"
		containerCodexAuthFile    = "/run/rascal-secrets/codex_auth.json"
		containerClaudeTokenFile  = "/run/rascal-secrets/claude_oauth_token"
	)
	agentRuntime := NormalizeRuntime(string(spec.AgentRuntime))
	codexHome, goosePathRoot, claudeConfigDir := containerCodexStateDir, containerGooseStateDir, containerClaudeStateDir
	if spec.TaskSession.Resume && strings.TrimSpace(spec.TaskSession.TaskDir) != "" {
		switch agentRuntime {
		case RuntimeCodex:
			codexHome = containerCodexSessionDir
		case RuntimeClaude:
			claudeConfigDir = containerClaudeSessionDir
		default:
			goosePathRoot = containerGooseSessionDir
		}
	}
	envPairs := map[string]string{
		"RASCAL_RUN_ID":              spec.RunID,
		"RASCAL_TASK_ID":             spec.TaskID,
		"RASCAL_INSTRUCTION":         spec.Instruction,
		"RASCAL_REPO":                spec.Repo,
		"RASCAL_AGENT_RUNTIME":       agentRuntime.String(),
		"RASCAL_BASE_BRANCH":         spec.BaseBranch,
		"RASCAL_HEAD_BRANCH":         spec.HeadBranch,
		"RASCAL_TRIGGER":             spec.Trigger.String(),
		"RASCAL_GOOSE_DEBUG":         strconv.FormatBool(spec.Debug),
		"RASCAL_CONTEXT":             spec.Context,
		"RASCAL_CONTEXT_JSON":        containerContextJSONPath,
		"RASCAL_ISSUE_NUMBER":        strconv.Itoa(spec.IssueNumber),
		"RASCAL_PR_NUMBER":           strconv.Itoa(spec.PRNumber),
		"RASCAL_TASK_SESSION_MODE":   string(spec.TaskSession.Mode),
		"RASCAL_TASK_SESSION_RESUME": strconv.FormatBool(spec.TaskSession.Resume),
		"RASCAL_TASK_SESSION_KEY":    strings.TrimSpace(spec.TaskSession.TaskKey),
		"RASCAL_TASK_SESSION_ID":     strings.TrimSpace(spec.TaskSession.RuntimeSessionID),
		"CODEX_HOME":                 codexHome,
		"GH_PROMPT_DISABLED":         "1",
		"GIT_TERMINAL_PROMPT":        "0",
	}
	if strings.TrimSpace(spec.ResultReportSocketPath) != "" {
		envPairs["RASCAL_RUN_RESULT_SOCKET"] = filepath.Join(containerControlDir, filepath.Base(strings.TrimSpace(spec.ResultReportSocketPath)))
	}
	if agentRuntime.Harness() == HarnessGoose {
		envPairs["GOOSE_PATH_ROOT"] = goosePathRoot
		envPairs["GOOSE_MOIM_MESSAGE_FILE"] = containerGooseMOIMPath
		envPairs["GOOSE_MODE"] = "auto"
		envPairs["GOOSE_DISABLE_KEYRING"] = "1"
		envPairs["GOOSE_DISABLE_SESSION_NAMING"] = "true"
		envPairs["GOOSE_CONTEXT_STRATEGY"] = "summarize"
	}
	switch agentRuntime {
	case RuntimeGooseCodex:
		envPairs["GOOSE_PROVIDER"] = "codex"
		envPairs["GOOSE_MODEL"] = "gpt-5.4"
	case RuntimeGooseClaude:
		envPairs["GOOSE_PROVIDER"] = "claude-code"
		envPairs["GOOSE_MODEL"] = "claude-sonnet-4-5"
		envPairs["CLAUDE_CONFIG_DIR"] = claudeConfigDir
	case RuntimeClaude:
		envPairs["CLAUDE_CONFIG_DIR"] = claudeConfigDir
	}
	if githubToken != "" && allowEnvSecrets {
		envPairs["GH_TOKEN"] = githubToken
	} else if githubToken != "" {
		envPairs["GH_TOKEN_FILE"] = containerGitHubTokenFile
	}
	switch agentRuntime.Provider() {
	case ModelProviderAnthropic:
		envPairs["CLAUDE_CODE_OAUTH_TOKEN_FILE"] = containerClaudeTokenFile
	default:
		envPairs["CODEX_AUTH_FILE"] = containerCodexAuthFile
	}
	return envPairs
}

// dockerPath is a Docker path as the layout names it in a sandbox.
var dockerPath = strings.NewReplacer(
	"/rascal-meta", "${META}",
	"/run/rascal-secrets", "${SECRETS}",
	"/rascal-codex-session", "${WORKSPACE}/rascal-codex-session",
	"/rascal-claude-session", "${WORKSPACE}/rascal-claude-session",
	"/rascal-goose-session", "${WORKSPACE}/rascal-goose-session",
)

// TestLayoutIsDockers: for every runtime, session mode and trigger, with
// and without a GitHub token, the layout sets every variable Docker's
// backend sets, to Docker's value or, for a path, to the same place in
// the sandbox; the only ones left out are the result socket and an
// environment token, and the only ones added are the worker's directories
// and the goose images' ENV. Its session directory is Docker's session
// mount, present exactly when Docker mounts one.
func TestLayoutIsDockers(t *testing.T) {
	omitted := map[string]bool{"RASCAL_RUN_RESULT_SOCKET": true, "GH_TOKEN": true}
	added := map[string]string{
		"RASCAL_META_DIR": "${META}", "RASCAL_WORK_ROOT": "${WORK}", "RASCAL_REPO_DIR": "${WORK}/repo",
	}
	addedGoose := map[string]string{"GOOSE_MAX_TURNS": "100", "GOOSE_AUTO_COMPACT_THRESHOLD": "0.0"}
	n := 0
	for _, rt := range append(Runtimes, "goose", "bogus") {
		for _, mode := range append(SessionModes, "") {
			for _, trig := range []TriggerName{TriggerCLI, TriggerPRComment, TriggerIssueEdited} {
				for _, tok := range []string{"", "ghp_x"} {
					n++
					resume := SessionEnabled(mode, trig)
					spec := Spec{
						RunID: "run_0123456789abcdef", TaskID: "t", Repo: "o/r", Instruction: "use ${META} literally",
						AgentRuntime: rt, Trigger: trig, Debug: true, Context: "c", IssueNumber: 3, PRNumber: 4,
						ResultReportSocketPath: "/data/run-results.sock",
						TaskSession:            TaskSessionSpec{Mode: mode, Resume: resume, RuntimeSessionID: "sid"},
					}
					if resume {
						spec.TaskSession.TaskDir, spec.TaskSession.TaskKey = "/data/agent-sessions/k", TaskSessionKey("o/r", "t")
					}
					r := &run{spec: spec, runtime: NormalizeRuntime(string(rt)), session: resume, githubToken: tok != ""}
					ls := launchSpec(r)
					got := map[string]string{}
					for k, v := range ls.Env {
						got[k] = v
					}
					for k, v := range ls.PathEnv {
						if _, dup := got[k]; dup {
							t.Fatalf("%s in Env and PathEnv", k)
						}
						got[k] = v
					}
					want := map[string]string{}
					for k, v := range dockerEnv(spec, tok, false) {
						if !omitted[k] {
							want[k] = dockerPath.Replace(v)
						}
					}
					for k, v := range added {
						want[k] = v
					}
					if r.runtime.Harness() == HarnessGoose {
						for k, v := range addedGoose {
							want[k] = v
						}
					}
					for k, v := range want {
						if got[k] != v {
							t.Errorf("%s mode %q %s token %v: %s = %q, want %q", rt, mode, trig, tok != "", k, got[k], v)
						}
					}
					for k := range got {
						if _, ok := want[k]; !ok {
							t.Errorf("%s mode %q %s: %s is set, and Docker does not set it", rt, mode, trig, k)
						}
					}
					if got["RASCAL_INSTRUCTION"] != spec.Instruction || ls.PathEnv["RASCAL_INSTRUCTION"] != "" {
						t.Errorf("the instruction is expanded or moved: %q", got["RASCAL_INSTRUCTION"])
					}
					wantSession := ""
					if resume {
						wantSession = strings.TrimPrefix(map[Runtime]string{RuntimeCodex: "/rascal-codex-session", RuntimeClaude: "/rascal-claude-session"}[r.runtime], "/")
						if wantSession == "" {
							wantSession = "rascal-goose-session"
						}
					}
					switch {
					case wantSession == "" && len(ls.Sessions) != 0:
						t.Errorf("%s mode %q %s: sessions %v, want none", rt, mode, trig, ls.Sessions)
					case wantSession != "" && (len(ls.Sessions) != 1 || ls.Sessions[0].Remote != wantSession || ls.Sessions[0].Key != spec.TaskSession.TaskKey):
						t.Errorf("%s mode %q %s: sessions %v, want %s", rt, mode, trig, ls.Sessions, wantSession)
					}
					if ls.Workdir != "work" || len(ls.Dirs) != 1 || ls.Dirs[0] != "work" {
						t.Errorf("workdir %q dirs %v", ls.Workdir, ls.Dirs)
					}
				}
			}
		}
	}
	if n < 100 {
		t.Fatalf("only %d combinations", n)
	}
}

// TestHandleAndKey: Rascal's handle names and session keys.
func TestHandleAndKey(t *testing.T) {
	for in, want := range map[string]string{
		"run_0123456789abcdef":  "rascal-run_0123456789abcdef",
		" Run.42 ":              "rascal-run-42",
		"":                      "rascal",
		strings.Repeat("x", 80): ("rascal-" + strings.Repeat("x", 80))[:63],
	} {
		if got := ExecutionHandleForRun(in); got.Name != want || got.Backend != "docker" || got.ID != "" {
			t.Errorf("ExecutionHandleForRun(%q) = %+v, want name %q", in, got, want)
		}
	}
	if got := TaskSessionKey("rtzll/rascal", "42"); !strings.HasPrefix(got, "rtzll-rascal-42-") || len(got) != len("rtzll-rascal-42-")+10 {
		t.Errorf("TaskSessionKey = %q", got)
	}
	if SecretsDir("/d/runs/run_1") != "/d/runs/.run_1-secrets" || SecretsDir("") != "" {
		t.Errorf("SecretsDir = %q", SecretsDir("/d/runs/run_1"))
	}
}
