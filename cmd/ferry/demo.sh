#!/usr/bin/env bash
# make demo: the relay-exec channel end to end on the embedded gateway.
# Starts an mTLS gateway on loopback, points an OpenShell-style client
# configuration at it, creates a sandbox, streams data through exec, checks
# exit codes, deletes the sandbox and stops the gateway.
set -euo pipefail

FERRY=${FERRY:-ferry}
work=$(mktemp -d)
gw_pid=
cleanup() {
	if [[ -n $gw_pid ]]; then kill "$gw_pid" 2>/dev/null || true; wait "$gw_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

if [[ -t 1 ]]; then bold=$'\033[1m' plain=$'\033[0m'; else bold= plain=; fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }

step "certificates for a local mTLS gateway"
"$FERRY" gateway certs "$work/certs"

step "start the embedded gateway (it isolates nothing: commands run as $(id -un))"
"$FERRY" gateway serve --listen 127.0.0.1:0 --root "$work/sandboxes" --tls-dir "$work/certs" 2>"$work/gateway.log" &
gw_pid=$!
addr=
for _ in $(seq 1 100); do
	addr=$(sed -n 's/^listening on \([^ ]*\).*/\1/p' "$work/gateway.log")
	[[ -n $addr ]] && break
	kill -0 "$gw_pid" 2>/dev/null || { cat "$work/gateway.log"; exit 1; }
	sleep 0.1
done
[[ -n $addr ]] || { echo "gateway did not start"; cat "$work/gateway.log"; exit 1; }
echo "gateway at https://$addr"

step "point an OpenShell client configuration at it (as ~/.config/openshell would)"
export XDG_CONFIG_HOME=$work/config
unset OPENSHELL_GATEWAY OPENSHELL_GATEWAY_ENDPOINT OPENSHELL_GATEWAY_INSECURE || true
mkdir -p "$XDG_CONFIG_HOME/openshell/gateways/demo"
cp -r "$work/certs/client" "$XDG_CONFIG_HOME/openshell/gateways/demo/mtls"
printf '{"name":"demo","gateway_endpoint":"https://%s","is_remote":false,"gateway_port":%s,"auth_mode":"mtls"}\n' \
	"$addr" "${addr##*:}" >"$XDG_CONFIG_HOME/openshell/gateways/demo/metadata.json"
echo demo >"$XDG_CONFIG_HOME/openshell/active_gateway"
find "$XDG_CONFIG_HOME/openshell" -type f | sed "s|$work/||"

step "ferry sandbox create demo-box"
"$FERRY" sandbox create demo-box
"$FERRY" sandbox list

step "ferry exec: arguments arrive exactly, stdin streams in"
echo "hello from the host" | "$FERRY" exec demo-box -- sh -c 'printf "stdin: %s\n" "$(cat)"; printf "arg: [%s]\n" "$@"' sh 'two words' "it's" '$(not run)'

step "ferry exec: 64 MiB through stdin and back, byte for byte"
head -c 67108864 /dev/urandom >"$work/blob"
want=$(sha256sum <"$work/blob" | cut -d' ' -f1)
start=$(date +%s.%N)
got=$("$FERRY" exec demo-box -- cat <"$work/blob" | sha256sum | cut -d' ' -f1)
end=$(date +%s.%N)
[[ $got == "$want" ]] || { echo "digest mismatch: $got != $want"; exit 1; }
printf 'sha256 %s matches (%.0f MiB/s)\n' "$got" "$(echo "64 / ($end - $start)" | bc -l)"

step "ferry exec: the remote exit code is ferry's exit code"
set +e
"$FERRY" exec demo-box -- sh -c 'echo "to stderr" >&2; exit 42'
code=$?
set -e
echo "exit code: $code"
[[ $code == 42 ]]

step "ferry exec --timeout: exit 124, process group killed"
set +e
"$FERRY" exec demo-box --timeout 1s -- sleep 30
code=$?
set -e
echo "exit code: $code"
[[ $code == 124 ]]

step "ferry cp: a tree in and out again, checked"
mkdir -p "$work/tree/src/empty dir" "$work/tree/src/nested/deeper"
echo "hello" >"$work/tree/src/greeting.txt"
printf 'x%.0s' $(seq 1 5000) >"$work/tree/src/nested/deeper/5k.txt"
ln -s greeting.txt "$work/tree/src/link-to-greeting"
chmod 0750 "$work/tree/src/nested"
# The first copy installs ferry's agent in the sandbox (one upload, cached
# under the sandbox's temp dir); --json says which mode moved the files.
"$FERRY" --json cp "$work/tree/src" demo-box:work/src
"$FERRY" exec demo-box -- sh -c 'cd work/src && find . | sort'
"$FERRY" --json cp demo-box:work/src "$work/back"
"$FERRY" --json --mode posix cp demo-box:work/src "$work/back-posix"
diff -r "$work/tree/src" "$work/back" && diff -r "$work/back" "$work/back-posix" && echo "round trip identical, agent and posix mode alike"

step "ferry sandbox delete demo-box"
"$FERRY" sandbox delete demo-box
set +e
"$FERRY" exec demo-box -- true
code=$?
set -e
echo "exec in a deleted sandbox: exit code $code"
[[ $code == 1 ]]

step "ferry run: an Option-B run with a scripted demo agent"
demo=$(cd "$(dirname "$0")/../../testdata/demo" && pwd)
mkdir -p "$work/secrets" && chmod 700 "$work/secrets"
printf 'ghp_demo_token_never_in_argv' >"$work/secrets/gh_token"
run_demo() { # SANDBOX RUN_ID OUT
	sed "s/run-0001/$2/" "$demo/context.json" >"$work/context-$2.json"
	"$FERRY" --store "$work/store" run "$1" --create default --delete --out "$3" \
		--in "$demo/instructions.md:rascal-meta/instructions.md" \
		--in "$work/context-$2.json:rascal-meta/context.json" \
		--in "$demo/agent.sh:agent.sh" \
		--secret "$work/secrets/gh_token:.rascal-secrets/gh_token" \
		--session "$session_key:rascal-codex-session" \
		--env RASCAL_META_DIR=rascal-meta --env GH_TOKEN_FILE=.rascal-secrets/gh_token \
		--env CODEX_HOME=rascal-codex-session \
		-- ./agent.sh
}
session_key=$("$FERRY" session key example/repo demo-task)
run_demo demo-run run-0001 "$work/run"
echo
echo "pulled artifacts in $work/run:"
ls -l "$work/run" | sed 1d
echo "meta.json: $(cat "$work/run/meta.json")"
echo "agent.ndjson:"
sed 's/^/  /' "$work/run/agent.ndjson"
grep -q '"exit_code": 0' "$work/run/meta.json"
if grep -rq ghp_demo_token "$work/gateway.log"; then echo "secret leaked into the gateway log"; exit 1; fi

step "ferry run again, in a new sandbox: the agent resumes its session ($session_key)"
run_demo demo-run-2 run-0002 "$work/run2" | tee "$work/run2.out"
grep -q "resumed a session" "$work/run2.out"
"$FERRY" --store "$work/store" session list "$session_key"

step "stop the gateway"
kill "$gw_pid"
wait "$gw_pid" || true
gw_pid=
echo "demo passed"
