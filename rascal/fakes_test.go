package rascal_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The fake CLIs stand for codex, claude, goose, gh and git (git is the
// real one, with clones of github.com redirected to a local bare
// repository). Each agent does what the real one leaves behind: a session
// file in its session directory, a change in the repository, a commit
// message, its output; and it says on stdout (which the worker sends to
// agent.ndjson) what it found: how many session records it saw, and the
// directory it was given. @STATE@, @GIT@ and @REMOTE@ are replaced.

const fakeHold = `touch "@STATE@/running-$RASCAL_RUN_ID"
while [ -e "@STATE@/hold-$RASCAL_TASK_ID" ]; do sleep 0.05; done
`

const fakeCodex = `#!/usr/bin/env bash
set -eu
out=""; resume=""; sid=""
while [ $# -gt 0 ]; do
  case "$1" in
    exec|--json|--dangerously-bypass-approvals-and-sandbox|--skip-git-repo-check|-) shift ;;
    resume) resume=1; shift ;;
    -o) out="$2"; shift 2 ;;
    *) sid="$1"; shift ;;
  esac
done
instr=$(cat)
home="${CODEX_HOME:?}"
seen=$(find "$home/sessions" -name '*.jsonl' 2>/dev/null | wc -l | tr -d ' ')
` + fakeHold + `id="${sid:-codex-$RASCAL_TASK_ID}"
mkdir -p "$home/sessions/2026/12"
printf '{"type":"session_meta","payload":{"id":"%s"}}\n{"type":"turn"}\n' "$id" > "$home/sessions/2026/12/$RASCAL_RUN_ID.jsonl"
echo "codex was here: $RASCAL_RUN_ID" >> README.md
echo "feat(fake): codex change for $RASCAL_RUN_ID" > "$RASCAL_META_DIR/commit_message.txt"
[ -z "$out" ] || echo "codex done" > "$out"
auth=no; [ -f "$home/auth.json" ] && auth=yes
printf '{"agent":"codex","seen":%s,"resume":"%s","session_id":"%s","home":"%s","auth":"%s","instructions":%s}\n' "$seen" "$resume" "$sid" "$home" "$auth" "${#instr}"
`

const fakeClaude = `#!/usr/bin/env bash
set -eu
out=""; sid=""
while [ $# -gt 0 ]; do
  case "$1" in
    --resume) sid="$2"; shift 2 ;;
    -o) out="$2"; shift 2 ;;
    *) shift ;;
  esac
done
instr=$(cat)
home="${CLAUDE_CONFIG_DIR:?}"
seen=$(find "$home/projects" -name '*.jsonl' 2>/dev/null | wc -l | tr -d ' ')
` + fakeHold + `mkdir -p "$home/projects/repo"
echo '{"type":"user"}' > "$home/projects/repo/$RASCAL_RUN_ID.jsonl"
echo "claude was here: $RASCAL_RUN_ID" >> README.md
echo "feat(fake): claude change for $RASCAL_RUN_ID" > "$RASCAL_META_DIR/commit_message.txt"
[ -z "$out" ] || echo "claude done" > "$out"
tok=no; [ -n "${CLAUDE_CODE_OAUTH_TOKEN:-}" ] && tok=yes
printf '{"agent":"claude","seen":%s,"resume":"%s","session_id":"%s","home":"%s","auth":"%s","instructions":%s}\n' "$seen" "${sid:+1}" "$sid" "$home" "$tok" "${#instr}"
`

const fakeGoose = `#!/usr/bin/env bash
set -eu
home="${GOOSE_PATH_ROOT:?}"
dir="$home/data/sessions"
if [ "$1" = session ] && [ "$2" = list ]; then
  printf '['; sep=""
  for f in "$dir"/*.jsonl; do [ -e "$f" ] || continue; n=$(basename "$f" .jsonl); printf '%s{"name":"%s"}' "$sep" "$n"; sep=","; done
  printf ']\n'; exit 0
fi
shift # run
name=""; resume=""; instr=""
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name="$2"; shift 2 ;;
    --resume) resume=1; shift ;;
    -i) instr="$2"; shift 2 ;;
    *) shift ;;
  esac
done
seen=$(cat "$dir"/*.jsonl 2>/dev/null | wc -l | tr -d ' ')
` + fakeHold + `if [ -n "$name" ]; then mkdir -p "$dir"; echo '{"role":"user"}' >> "$dir/$name.jsonl"; fi
echo "goose was here: $RASCAL_RUN_ID" >> README.md
echo "feat(fake): goose change for $RASCAL_RUN_ID" > "$RASCAL_META_DIR/commit_message.txt"
auth=no; { [ -n "${CLAUDE_CODE_OAUTH_TOKEN:-}" ] || [ -f "${CODEX_HOME:-/nonexistent}/auth.json" ]; } && auth=yes
printf '{"agent":"goose","seen":%s,"resume":"%s","session_id":"%s","home":"%s","auth":"%s","instructions":%s,"provider":"%s","moim":"%s"}\n' "$seen" "$resume" "$name" "$home" "$auth" "$(wc -c < "$instr" | tr -d ' ')" "$GOOSE_PROVIDER" "$GOOSE_MOIM_MESSAGE_FILE"
`

const fakeGH = `#!/usr/bin/env bash
set -eu
key() { echo "@STATE@/pr-$(echo "$1" | tr '/' '_')"; }
case "${1:-} ${2:-}" in
  "api user") echo '{"login":"ferry-bot"}' ;;
  "pr view") f=$(key "$3"); if [ -f "$f" ]; then cat "$f"; else echo "no pull requests found for branch $3" >&2; exit 1; fi ;;
  "pr create")
    repo=""; head=""
    while [ $# -gt 0 ]; do case "$1" in --repo) repo="$2"; shift ;; --head) head="$2"; shift ;; esac; shift; done
    n=$(( $(ls "@STATE@" | grep -c '^pr-' || true) + 1 ))
    printf '{"number":%d,"url":"https://github.com/%s/pull/%d"}\n' "$n" "$repo" "$n" > "$(key "$head")"
    echo "https://github.com/$repo/pull/$n" ;;
  *) echo "fake gh: unexpected $*" >&2; exit 1 ;;
esac
`

const fakeGit = `#!/usr/bin/env bash
if [ "${1:-}" = clone ] && [[ "${2:-}" == https://github.com/* ]]; then
  exec "@GIT@" clone "file://@REMOTE@" "$3"
fi
exec "@GIT@" "$@"
`

// standInWorker stands for Rascal's rascal-runner (internal/worker) when
// FERRY_RASCAL_RUNNER does not name a build of it: it reads the same
// variables and files, runs the agent with the same arguments, and writes
// meta.json (exit_code 1 first, the result last) as the worker does.
const standInWorker = `#!/usr/bin/env bash
set -u
ts() { date -u +%Y-%m-%dT%H:%M:%SZ; }
log() { echo "[$(ts)] $*"; }
META="${RASCAL_META_DIR:-/rascal-meta}"; WORK="${RASCAL_WORK_ROOT:-/work}"; REPO="${RASCAL_REPO_DIR:-$WORK/repo}"
BASE="${RASCAL_BASE_BRANCH:-main}"; HEAD="${RASCAL_HEAD_BRANCH:-rascal/$RASCAL_RUN_ID}"
rt="${RASCAL_AGENT_RUNTIME:-goose-codex}"; mode="${RASCAL_TASK_SESSION_MODE:-off}"
resume="${RASCAL_TASK_SESSION_RESUME:-false}"; [ "$mode" = off ] && resume=false
sid="${RASCAL_TASK_SESSION_ID:-}"
GPR="${GOOSE_PATH_ROOT:-$META/goose}"; CH="${CODEX_HOME:-$META/codex}"
pr_number=0; pr_url=""; head_sha=""; task_sid=""
meta() {
  printf '{"run_id":"%s","task_id":"%s","repo":"%s","base_branch":"%s","head_branch":"%s","pr_number":%s,"pr_url":"%s","head_sha":"%s","task_session_id":"%s","exit_code":%s,"error":"%s"}\n' \
    "$RASCAL_RUN_ID" "$RASCAL_TASK_ID" "$RASCAL_REPO" "$BASE" "$HEAD" "$pr_number" "$pr_url" "$head_sha" "$task_sid" "$1" "$2" > "$META/meta.json"
}
fail() { log "run failed: $1"; meta 1 "$1"; exit 1; }
log "starting rascal-runner stand-in"
token="${GH_TOKEN:-}"
if [ -z "$token" ]; then
  [ -n "${GH_TOKEN_FILE:-}" ] || { echo "required env GH_TOKEN or GH_TOKEN_FILE is not set"; exit 1; }
  token=$(cat "$GH_TOKEN_FILE") || { echo "read GH_TOKEN_FILE failed"; exit 1; }
fi
meta 1 ""
mkdir -p "$META/goose" "$GPR" "$META/codex" "$CH" "$WORK" || fail "create dirs"
case "$rt" in codex) need="codex" ;; claude) need="claude" ;; goose-claude) need="goose claude" ;; *) need="goose" ;; esac
for c in git gh $need; do command -v "$c" >/dev/null || fail "required command missing: $c"; done
login=$(GH_TOKEN="$token" gh api user | sed -n 's/.*"login":"\([^"]*\)".*/\1/p')
[ -n "$login" ] || fail "resolve git identity"
git clone "https://github.com/$RASCAL_REPO.git" "$REPO" >/dev/null 2>&1 || fail "clone repository"
cd "$REPO" || fail "cd repo"
git fetch origin "$BASE" "$HEAD" >/dev/null 2>&1
git checkout "$BASE" >/dev/null 2>&1 || git checkout -b "$BASE" "origin/$BASE" >/dev/null 2>&1 || fail "checkout base branch $BASE"
if git ls-remote --exit-code --heads origin "$HEAD" >/dev/null 2>&1; then
  git checkout -b "$HEAD" "origin/$HEAD" >/dev/null 2>&1 || fail "checkout remote head branch $HEAD"
else
  git checkout -b "$HEAD" >/dev/null 2>&1 || fail "create head branch $HEAD"
fi
git config user.name "$login"; git config user.email "$login@users.noreply.github.com"
if [ "$rt" != claude ] && [ "$rt" != goose-claude ]; then
  src="${CODEX_AUTH_FILE:-$META/codex/auth.json}"; [ -f "$src" ] && cp "$src" "$CH/auth.json"
fi
ctok=""; [ -n "${CLAUDE_CODE_OAUTH_TOKEN_FILE:-}" ] && [ -f "$CLAUDE_CODE_OAUTH_TOKEN_FILE" ] && ctok=$(cat "$CLAUDE_CODE_OAUTH_TOKEN_FILE")
case "$rt" in
  codex)
    args=(exec); [ "$resume" = true ] && [ -n "$sid" ] && args+=(resume)
    args+=(--json --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check -o "$META/agent_output.txt")
    [ "$resume" = true ] && [ -n "$sid" ] && args+=("$sid")
    args+=(-)
    codex "${args[@]}" < "$META/instructions.md" > "$META/agent.ndjson" 2>&1 || fail "codex run failed"
    f=$(ls -t $(find "$CH/sessions" -name '*.jsonl' 2>/dev/null) 2>/dev/null | head -1)
    [ -z "$f" ] || task_sid=$(head -1 "$f" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p') ;;
  claude)
    args=(-p); [ "$resume" = true ] && [ -n "$sid" ] && args+=(--resume "$sid")
    args+=(--output-format stream-json --verbose --dangerously-skip-permissions -o "$META/agent_output.txt" -)
    CLAUDE_CODE_OAUTH_TOKEN="$ctok" claude "${args[@]}" < "$META/instructions.md" > "$META/agent.ndjson" 2>&1 || fail "claude run failed"
    task_sid="$sid" ;;
  *)
    r="$resume"
    if [ "$r" = true ] && [ -n "$sid" ] && ! goose session list --format json | grep -q "\"name\":\"$sid\""; then r=false; fi
    if [ "$mode" != off ] && [ -n "$sid" ]; then args=(run --name "$sid"); [ "$r" = true ] && args+=(--resume); else args=(run --no-session); fi
    args+=(-i "$META/instructions.md" --output-format stream-json)
    [ "${RASCAL_GOOSE_DEBUG:-true}" = true ] && args+=(--debug)
    CLAUDE_CODE_OAUTH_TOKEN="$ctok" goose "${args[@]}" > "$META/agent.ndjson" 2>&1 || fail "goose run failed"
    task_sid="$sid" ;;
esac
title="chore(rascal): $RASCAL_TASK_ID"
[ -f "$META/commit_message.txt" ] && title=$(head -1 "$META/commit_message.txt")
if [ -n "$(git status --porcelain)" ]; then
  git add -A && git commit -q -m "$title" -m "Run: $RASCAL_RUN_ID" || fail "git commit"
fi
ahead=$(git rev-list --left-right --count "origin/$BASE...HEAD" | awk '{print $2}')
[ "${ahead:-0}" -gt 0 ] || fail "agent produced no commits ahead of $BASE"
git push -q -u origin "$HEAD" >/dev/null 2>&1 || fail "git push failed"
if view=$(gh pr view "$HEAD" --repo "$RASCAL_REPO" --json number,url 2>/dev/null); then :; else
  echo "PR for $RASCAL_RUN_ID" > "$META/pr_body.md"
  gh pr create --repo "$RASCAL_REPO" --base "$BASE" --head "$HEAD" --label rascal --title "$title" --body-file "$META/pr_body.md" >/dev/null || fail "gh pr create failed"
  view=$(gh pr view "$HEAD" --repo "$RASCAL_REPO" --json number,url)
fi
pr_number=$(echo "$view" | sed -n 's/.*"number":\([0-9]*\).*/\1/p'); pr_url=$(echo "$view" | sed -n 's/.*"url":"\([^"]*\)".*/\1/p')
head_sha=$(git rev-parse HEAD)
meta 0 ""
log "run completed exit_code=0"
`

// fakes is a directory of fake CLIs, the worker among them, and a bare
// repository they clone.
type fakes struct {
	bin, state, remote string
	// real: the worker is Rascal's own rascal-runner.
	real bool
}

func newFakes(t *testing.T) *fakes {
	t.Helper()
	root := t.TempDir()
	f := &fakes{bin: filepath.Join(root, "bin"), state: filepath.Join(root, "state"), remote: filepath.Join(root, "remote.git")}
	must(t, os.MkdirAll(f.bin, 0o755))
	must(t, os.MkdirAll(f.state, 0o755))
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	seed := filepath.Join(root, "seed")
	for _, args := range [][]string{
		{"init", "-q", "--bare", f.remote},
		{"init", "-q", "-b", "main", seed},
		{"-C", seed, "-c", "user.name=seed", "-c", "user.email=seed@example.com", "commit", "-q", "--allow-empty", "-m", "chore: seed"},
		{"-C", seed, "push", "-q", f.remote, "main"},
	} {
		if out, err := exec.Command(git, args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	r := strings.NewReplacer("@STATE@", f.state, "@GIT@", git, "@REMOTE@", f.remote)
	scripts := map[string]string{"codex": fakeCodex, "claude": fakeClaude, "goose": fakeGoose, "gh": fakeGH, "git": fakeGit}
	if p := os.Getenv("FERRY_RASCAL_RUNNER"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("FERRY_RASCAL_RUNNER: %v", err)
		}
		must(t, os.WriteFile(filepath.Join(f.bin, "rascal-runner"), b, 0o755))
		f.real = true
	} else {
		scripts["rascal-runner"] = standInWorker
	}
	for name, s := range scripts {
		must(t, os.WriteFile(filepath.Join(f.bin, name), []byte(r.Replace(s)), 0o755))
	}
	return f
}

// path is the PATH the sandbox gets: the fakes first.
func (f *fakes) path() string { return f.bin + ":/usr/local/bin:/usr/bin:/bin" }

func (f *fakes) hold(task string) string { return filepath.Join(f.state, "hold-"+task) }

func (f *fakes) running(runID string) string { return filepath.Join(f.state, "running-"+runID) }
