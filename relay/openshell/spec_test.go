package openshell_test

import (
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/openshell/policy"
)

// hostCanary is a host variable no spec names: it must not reach a
// request.
const hostCanary = "ferry-host-canary-5d1c9e"

// rascalSpec is a sandbox as the Rascal backend design asks for one.
func rascalSpec(t *testing.T, pol *policy.Policy) openshell.Spec {
	t.Helper()
	return openshell.Spec{
		Name:      "run-42",
		Image:     "ghcr.io/rtzll/rascal-runner:1",
		Env:       map[string]string{"GIT_TERMINAL_PROMPT": "0", "GH_PROMPT_DISABLED": "1"},
		Labels:    map[string]string{"rascal.run_id": "r42", "rascal.task_id": "t7", "rascal.repo": "rtzll-rascal", "ferry.managed": "true"},
		Policy:    pol,
		Providers: []string{"github", "anthropic"},
	}
}

// TestCreateRequestPinned pins every field of the CreateSandboxRequest
// for one configuration, and that nothing of the host's environment is
// in it: the request is built from the Spec alone.
func TestCreateRequestPinned(t *testing.T) {
	t.Setenv("FERRY_TEST_HOST_SECRET", hostCanary)
	t.Setenv("GH_TOKEN", hostCanary+"-gh")
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	pol, err := policy.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	got := openshell.CreateRequest(c, rascalSpec(t, pol))
	want := &openshellv1.CreateSandboxRequest{
		Name:      "run-42",
		Workspace: "default",
		Labels:    map[string]string{"rascal.run_id": "r42", "rascal.task_id": "t7", "rascal.repo": "rtzll-rascal", "ferry.managed": "true"},
		Spec: &openshellv1.SandboxSpec{
			Environment: map[string]string{"GIT_TERMINAL_PROMPT": "0", "GH_PROMPT_DISABLED": "1"},
			Template:    &openshellv1.SandboxTemplate{Image: "ghcr.io/rtzll/rascal-runner:1"},
			Policy:      pol.Proto(),
			Providers:   []string{"github", "anthropic"},
		},
	}
	if !proto.Equal(got, want) {
		o := prototext.MarshalOptions{Multiline: true}
		t.Fatalf("request:\n%s\nwant:\n%s", o.Format(got), o.Format(want))
	}
	b, err := proto.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	yaml, _ := policy.Builtin("default")
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		// Short values ("1", "/root") occur in any policy by chance, and
		// a binary's path ($_) may be one the policy names.
		if len(v) >= 16 && strings.Contains(string(b), v) && !strings.Contains(string(yaml), v) {
			t.Errorf("host variable %s's value is in the request", k)
		}
	}
	if strings.Contains(string(b), hostCanary) {
		t.Fatal("the host canary is in the request")
	}

	// The minimal spec: a spec always (a gateway refuses a create
	// without), and nothing else.
	got = openshell.CreateRequest(c, openshell.Spec{Name: "bare"})
	want = &openshellv1.CreateSandboxRequest{Name: "bare", Workspace: "default", Spec: &openshellv1.SandboxSpec{}}
	if !proto.Equal(got, want) {
		t.Fatalf("bare request %v, want %v", got, want)
	}
}

// TestPolicyRoundTrip: YAML, parsed, sent with Create, comes back from
// GetSandbox as it was parsed, with the providers, environment and
// labels.
func TestPolicyRoundTrip(t *testing.T) {
	const rich = `
version: 1
filesystem_policy: {include_workdir: true, read_only: [/usr], read_write: [/sandbox, /tmp]}
landlock: {compatibility: best_effort}
process: {run_as_user: sandbox, run_as_group: sandbox}
network_policies:
  gh:
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        tls: terminate
        rules: [{allow: {method: GET, path: "/repos/**", query: {per_page: {any: ["1*"]}}}}]
        deny_rules: [{method: DELETE, path: "/**"}]
        credential_binding: {provider: github}
    binaries: [{path: /usr/bin/gh}]
network_middlewares:
  guard: {middleware: content_guard, order: 1, config: {mode: strict}, endpoints: {include: ["*.github.com"]}}
`
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	ctx := ctxFor(t)
	g.Providers(t, c, "github", "anthropic")
	for _, tc := range []struct{ name, ref, yaml string }{
		{"Rich", "", rich},
		{"Default", "default", ""},
		{"DenyAll", "deny-all", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pol *policy.Policy
			var err error
			if tc.ref != "" {
				pol, err = policy.Load(tc.ref)
			} else {
				pol, err = policy.Parse([]byte(tc.yaml))
			}
			if err != nil {
				t.Fatal(err)
			}
			spec := rascalSpec(t, pol)
			spec.Name = "rt-" + strings.ToLower(tc.name)
			info, err := c.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(info.Providers, ",") != "github,anthropic" || info.Labels["ferry.managed"] != "true" {
				t.Errorf("Create returned providers %v labels %v", info.Providers, info.Labels)
			}
			resp, err := openshell.API(c).GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: spec.Name})
			if err != nil {
				t.Fatal(err)
			}
			sb := resp.GetSandbox()
			if got := sb.GetSpec().GetPolicy(); !proto.Equal(got, pol.Proto()) {
				o := prototext.MarshalOptions{Multiline: true}
				t.Fatalf("GetSandbox policy:\n%s\nsent:\n%s", o.Format(got), o.Format(pol.Proto()))
			}
			if got := sb.GetSpec().GetProviders(); strings.Join(got, ",") != "github,anthropic" {
				t.Errorf("providers %v", got)
			}
			if got := sb.GetSpec().GetEnvironment(); len(got) != 2 || got["GIT_TERMINAL_PROMPT"] != "0" || got["GH_PROMPT_DISABLED"] != "1" {
				t.Errorf("environment %v", got)
			}
			if got := sb.GetMetadata().GetLabels(); len(got) != 4 || got["rascal.repo"] != "rtzll-rascal" {
				t.Errorf("labels %v", got)
			}
		})
	}
}

// TestCreateRefusesWhatCheckRefuses: the gateway's refusal and Check's are
// the same words, since they are one implementation.
func TestCreateRefusesWhatCheckRefuses(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	pol, err := policy.Parse([]byte("version: 1\nprocess: {run_as_user: root}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Create(ctxFor(t), openshell.Spec{Name: "rooted", Policy: pol})
	want := policy.Validate(pol.Proto()).Error()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Create: %v, want the gateway to say %q", err, want)
	}
}
