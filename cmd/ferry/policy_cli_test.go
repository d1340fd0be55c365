package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell/policy"
)

func TestPolicyShowGolden(t *testing.T) {
	isolate(t)
	for _, name := range policy.Names() {
		t.Run(name, func(t *testing.T) {
			r := runFerry(t, nil, "policy", "show", name)
			wantOK(t, r)
			golden(t, filepath.Join("policy", name+".yaml.golden"), r.stdout)
			// What users copy is what ferry sends.
			if b, _ := policy.Builtin(name); string(b) != r.stdout {
				t.Fatal("show printed something else than the built-in policy")
			}
		})
	}
	wantUsage(t, runFerry(t, nil, "policy", "show", "nosuch"), "no such built-in policy")
	wantUsage(t, runFerry(t, nil, "policy"), "show or check")

	out := filepath.Join(t.TempDir(), "p.yaml")
	wantOK(t, runFerry(t, nil, "policy", "show", "deny-all", "-o", out))
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("--output wrote %v, %v; want mode 0600", fi, err)
	}
	if b, _ := os.ReadFile(out); !strings.Contains(string(b), "hard_requirement") {
		t.Fatalf("--output wrote %q", b)
	}
}

func TestPolicyCheck(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, []byte(body), 0o600)
		return p
	}
	good := file("good.yaml", "version: 1\nnetwork_policies:\n  gh:\n    endpoints: [{host: github.com, port: 443}]\n    binaries: [{path: /usr/bin/git}]\n")
	r := runFerry(t, nil, "policy", "check", good)
	wantOK(t, r)
	if r.stdout != good+": ok (1 network policies)\n" {
		t.Errorf("check printed %q", r.stdout)
	}
	r = runFerry(t, nil, "--json", "policy", "check", "default")
	wantOK(t, r)
	var js struct {
		Policy   string `json:"policy"`
		OK       bool   `json:"ok"`
		Policies int    `json:"network_policies"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || !js.OK || js.Policy != "default" || js.Policies < 5 {
		t.Errorf("check --json printed %q (%v)", r.stdout, err)
	}
	wantOK(t, runFerry(t, nil, "-q", "policy", "check", "deny-all"))

	unknown := file("unknown.yaml", "version: 1\nnetwork_policies:\n  gh:\n    endpoints:\n      - host: github.com\n        prot: 443\n")
	wantFailure(t, runFerry(t, nil, "policy", "check", unknown), unknown, "line 6", "network_policies.gh.endpoints[0].prot", "unknown key")
	wrongType := file("type.yaml", "version: 1\nfilesystem_policy:\n  include_workdir: maybe\n")
	wantFailure(t, runFerry(t, nil, "policy", "check", wrongType), "line 3", "filesystem_policy.include_workdir", "expected true or false")
	unsafe := file("unsafe.yaml", "version: 1\nprocess:\n  run_as_user: root\n")
	wantFailure(t, runFerry(t, nil, "policy", "check", unsafe), "policy contains unsafe content", "line 3: process.run_as_user", "got 'root'")
	wantFailure(t, runFerry(t, nil, "policy", "check", filepath.Join(dir, "missing.yaml")), "no such file")
}

// TestSandboxCreateSpec: create's policy, providers, labels and
// environment reach the gateway's record, and --json shows the labels and
// providers.
func TestSandboxCreateSpec(t *testing.T) {
	g := activeGateway(t)
	dir := t.TempDir()
	polFile := filepath.Join(dir, "policy.yaml")
	b, _ := policy.Builtin("default")
	writeFile(t, polFile, b, 0o600)
	createProviders(t, "github", "anthropic")

	r := runFerry(t, nil, "--json", "sandbox", "create", "box", "--policy", polFile,
		"--provider", "github", "--provider", "anthropic",
		"--label", "ferry.managed=true", "--label", "rascal.run_id=r42",
		"-e", "GIT_TERMINAL_PROMPT=0", "-e", "GH_PROMPT_DISABLED=1")
	wantOK(t, r)
	golden(t, "json/create-spec.golden", normalizeJSON(t, r.stdout))

	sb := getSandbox(t, g, "box")
	want, err := policy.ParseFile(polFile)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(sb.GetSpec().GetPolicy(), want.Proto()) {
		t.Error("the gateway's record holds another policy than the file's")
	}
	if got := strings.Join(sb.GetSpec().GetProviders(), ","); got != "github,anthropic" {
		t.Errorf("providers %s", got)
	}
	if env := sb.GetSpec().GetEnvironment(); len(env) != 2 || env["GIT_TERMINAL_PROMPT"] != "0" || env["GH_PROMPT_DISABLED"] != "1" {
		t.Errorf("environment %v", env)
	}
	if l := sb.GetMetadata().GetLabels(); len(l) != 2 || l["rascal.run_id"] != "r42" {
		t.Errorf("labels %v", l)
	}

	// A built-in by name; deny-all has no network rules.
	wantOK(t, runFerry(t, nil, "-q", "sandbox", "create", "sealed", "--policy", "deny-all"))
	if sb := getSandbox(t, g, "sealed"); sb.GetSpec().GetPolicy().GetLandlock().GetCompatibility() != "hard_requirement" || len(sb.GetSpec().GetPolicy().GetNetworkPolicies()) != 0 {
		t.Errorf("deny-all stored as %v", sb.GetSpec().GetPolicy())
	}

	// Refusals, before anything is created.
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, []byte("version: 1\nprocess:\n  run_as_user: root\n"), 0o600)
	wantFailure(t, runFerry(t, nil, "sandbox", "create", "rooted", "--policy", bad), "line 3: process.run_as_user")
	wantFailure(t, runFerry(t, nil, "sandbox", "get", "rooted"), "not found")
	wantUsage(t, runFerry(t, nil, "sandbox", "create", "x", "--label", "novalue"), "--label \"novalue\": want KEY=VALUE")
	wantUsage(t, runFerry(t, nil, "sandbox", "create", "x", "--label", "a=1", "--label", "a=2"), "a given twice")
	wantUsage(t, runFerry(t, nil, "sandbox", "create", "x", "--provider", "github", "--provider", "github"), "once")
}

// TestRunCreateSpec: run --create takes the same flags; the command sees
// the sandbox's static environment; without --create they are a mistake.
func TestRunCreateSpec(t *testing.T) {
	g := activeGateway(t)
	createProviders(t, "github")
	out := filepath.Join(t.TempDir(), "run")
	r := runFerry(t, nil, "run", "made", "--create", "default", "--out", out,
		"--policy", "default", "--provider", "github", "--label", "ferry.managed=true",
		"--sandbox-env", "GIT_TERMINAL_PROMPT=0", "-e", "PER_RUN=yes",
		"--", "sh", "-c", `echo "static=$GIT_TERMINAL_PROMPT run=$PER_RUN"; mkdir -p rascal-meta; echo '{}' > rascal-meta/meta.json`)
	if r.code != 0 {
		t.Fatalf("run: exit %d, stderr %q", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "static=0 run=yes") {
		t.Errorf("command printed %q, want the sandbox's and the run's variables", r.stdout)
	}
	sb := getSandbox(t, g, "made")
	want, _ := policy.Load("default")
	if !proto.Equal(sb.GetSpec().GetPolicy(), want.Proto()) || strings.Join(sb.GetSpec().GetProviders(), ",") != "github" ||
		sb.GetMetadata().GetLabels()["ferry.managed"] != "true" || sb.GetSpec().GetEnvironment()["PER_RUN"] != "" {
		t.Errorf("sandbox made from %v", sb)
	}
	wantUsage(t, runFerry(t, nil, "run", "made", "--policy", "default", "--", "true"), "need --create")
}

func getSandbox(t *testing.T, g *gatewaytest.Gateway, name string) *openshellv1.Sandbox {
	t.Helper()
	resp, err := g.Server.GetSandbox(context.Background(), &openshellv1.GetSandboxRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetSandbox()
}
