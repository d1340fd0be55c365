#!/bin/sh
# A scripted stand-in for a coding agent, for `make demo`: it reads the
# run's instructions and context from $RASCAL_META_DIR (as Rascal's worker
# does), streams a few stream-json lines to agent.ndjson, and writes
# meta.json at the start (exit_code 1) and again at the end, like the worker.
set -eu
meta=${RASCAL_META_DIR:-rascal-meta}
run_id=$(sed -n 's/.*"run_id": *"\([^"]*\)".*/\1/p' "$meta/context.json")
task=$(head -n 1 "$meta/instructions.md")

write_meta() {
	cat >"$meta/meta.json.tmp" <<JSON
{"run_id": "$run_id", "task_id": "demo-task", "repo": "example/repo", "head_sha": "0000000", "exit_code": $1, "error": ""}
JSON
	mv "$meta/meta.json.tmp" "$meta/meta.json"
}

write_meta 1
# The session directory (codex's CODEX_HOME) survives from run to run
# through ferry's session store: a transcript that grows by appends.
session=${CODEX_HOME:-rascal-codex-session}
mkdir -p "$session/sessions"
before=$(cat "$session/sessions/transcript.jsonl" 2>/dev/null | wc -l | tr -d ' ')
if [ "$before" -gt 0 ]; then
	echo "agent: resumed a session of $before transcript lines"
else
	echo "agent: new session"
	# A first run brings some history with it (as a real transcript would).
	i=0
	while [ $i -lt 2000 ]; do
		printf '{"type":"history","n":%d,"text":"earlier context line %d of the task"}\n' "$i" "$i"
		i=$((i + 1))
	done >>"$session/sessions/transcript.jsonl"
fi
printf '{"type":"run","run_id":"%s","task":"%s"}\n' "$run_id" "$task" >>"$session/sessions/transcript.jsonl"
echo "$(date -u +%FT%TZ) agent: starting run $run_id" >>"$meta/runner.log"
echo "agent: read task: $task"
i=1
for step in "reading the repository" "planning the change" "editing files" "running the tests"; do
	printf '{"type":"assistant","step":%d,"text":"%s"}\n' "$i" "$step" >>"$meta/agent.ndjson"
	echo "agent: $step"
	i=$((i + 1))
	sleep 0.2
done
echo "Done: $task" >"$meta/agent_output.txt"
printf 'demo: %s\n\nMade by the demo agent.\n' "$task" >"$meta/commit_message.txt"
echo "$(date -u +%FT%TZ) agent: finished" >>"$meta/runner.log"
write_meta 0
echo "agent: wrote meta.json"
