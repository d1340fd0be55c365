package gateway_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	datamodelv1 "github.com/ferry-dev/ferry/proto/openshell/datamodel/v1"
	sandboxv1 "github.com/ferry-dev/ferry/proto/openshell/sandbox/v1"
	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
)

// safePolicy is the baseline of upstream's e2e test_policy_validation.py.
func safePolicy() *sandboxv1.SandboxPolicy {
	return &sandboxv1.SandboxPolicy{
		Version: 1,
		Filesystem: &sandboxv1.FilesystemPolicy{
			IncludeWorkdir: true,
			ReadOnly:       []string{"/usr", "/lib", "/etc", "/app", "/var/log"},
			ReadWrite:      []string{"/sandbox", "/tmp"},
		},
		Landlock: &sandboxv1.LandlockPolicy{Compatibility: "best_effort"},
		Process:  &sandboxv1.ProcessPolicy{RunAsUser: "sandbox", RunAsGroup: "sandbox"},
	}
}

func withPolicy(edit func(p *sandboxv1.SandboxPolicy)) *openshellv1.SandboxSpec {
	p := safePolicy()
	edit(p)
	return &openshellv1.SandboxSpec{Policy: p}
}

func endpointPolicy(ep *sandboxv1.NetworkEndpoint) func(p *sandboxv1.SandboxPolicy) {
	return func(p *sandboxv1.SandboxPolicy) {
		p.NetworkPolicies = map[string]*sandboxv1.NetworkPolicyRule{"api": {Endpoints: []*sandboxv1.NetworkEndpoint{ep}}}
	}
}

// TestCreateRefusesUnsafePolicy sends the policies upstream refuses (its
// e2e test's three and the rest of validate_sandbox_policy's checks); each
// is INVALID_ARGUMENT naming what is wrong, and nothing is created.
func TestCreateRefusesUnsafePolicy(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c, _ := rawClient(t, g)
	for _, tc := range []struct {
		name string
		spec *openshellv1.SandboxSpec
		msg  string // the message holds it, as the e2e test checks
	}{
		{"NoSpec", nil, "spec is required"},
		// test_create_sandbox_rejects_root_user: "root" in the message.
		{"RootUser", withPolicy(func(p *sandboxv1.SandboxPolicy) { p.Process.RunAsUser = "root" }),
			"policy contains unsafe content: run_as_user must be 'sandbox' or a numeric UID/GID in range [1, 4294967294], got 'root'"},
		{"RootGroupID", withPolicy(func(p *sandboxv1.SandboxPolicy) { p.Process.RunAsGroup = "0" }),
			"run_as_group must be 'sandbox' or a numeric UID/GID in range [1, 4294967294], got '0'"},
		{"InvalidIDSentinel", withPolicy(func(p *sandboxv1.SandboxPolicy) { p.Process.RunAsUser = "4294967295" }), "run_as_user must be"},
		{"NamedUser", withPolicy(func(p *sandboxv1.SandboxPolicy) { p.Process.RunAsUser = "nobody" }), "got 'nobody'"},
		// test_create_sandbox_rejects_path_traversal: "traversal".
		{"PathTraversal", withPolicy(func(p *sandboxv1.SandboxPolicy) { p.Filesystem.ReadOnly = []string{"/usr/../etc/shadow"} }),
			"path contains '..' traversal component: /usr/../etc/shadow"},
		// test_create_sandbox_rejects_overly_broad_paths: "broad".
		{"ReadWriteRoot", withPolicy(func(p *sandboxv1.SandboxPolicy) { p.Filesystem.ReadWrite = []string{"/"} }),
			"read-write path is overly broad: /"},
		{"ReadWriteSlashes", withPolicy(func(p *sandboxv1.SandboxPolicy) { p.Filesystem.ReadWrite = []string{"///"} }),
			"read-write path is overly broad: ///"},
		{"RelativePath", withPolicy(func(p *sandboxv1.SandboxPolicy) { p.Filesystem.ReadWrite = []string{"tmp"} }),
			"path must be absolute (start with '/'): tmp"},
		{"LongPath", withPolicy(func(p *sandboxv1.SandboxPolicy) { p.Filesystem.ReadOnly = []string{"/" + strings.Repeat("a", 4096)} }),
			"path exceeds maximum length (4097 > 4096): /" + strings.Repeat("a", 76) + "..."},
		{"TooManyPaths", withPolicy(func(p *sandboxv1.SandboxPolicy) { p.Filesystem.ReadOnly = repeat(257, "/usr") }),
			"too many filesystem paths (259 > 256)"},
		{"AllViolations", withPolicy(func(p *sandboxv1.SandboxPolicy) {
			p.Process.RunAsUser = "root"
			p.Filesystem.ReadWrite = []string{"/"}
		}), "got 'root'; read-write path is overly broad: /"},
		{"ReservedProviderKey", withPolicy(func(p *sandboxv1.SandboxPolicy) {
			p.NetworkPolicies = map[string]*sandboxv1.NetworkPolicyRule{"_provider_github": {Endpoints: []*sandboxv1.NetworkEndpoint{{Host: "api.github.com", Port: 443}}}}
		}), "network_policies key '_provider_github' uses reserved '_provider_' prefix"},
		{"TLDWildcard", withPolicy(endpointPolicy(&sandboxv1.NetworkEndpoint{Host: "*.com", Port: 443})),
			"network policy 'api': TLD wildcard '*.com' is not allowed"},
		{"NoPort", withPolicy(endpointPolicy(&sandboxv1.NetworkEndpoint{Host: "example.com"})),
			"network policy 'api': endpoint 'example.com' must declare at least one port"},
		{"BadPort", withPolicy(endpointPolicy(&sandboxv1.NetworkEndpoint{Host: "example.com", Ports: []uint32{70000}})),
			"endpoint 'example.com' has invalid port 70000; expected 1..=65535"},
		{"NoHost", withPolicy(endpointPolicy(&sandboxv1.NetworkEndpoint{Port: 443})),
			"network policy 'api': endpoint host must not be empty"},
		{"TCPIPLiteral", withPolicy(endpointPolicy(&sandboxv1.NetworkEndpoint{Host: "10.0.0.1", Port: 22, Protocol: "tcp"})),
			"protocol tcp endpoint '10.0.0.1' must use a DNS hostname"},
		{"MiddleWildcard", withPolicy(endpointPolicy(&sandboxv1.NetworkEndpoint{Host: "api.*x.example.com", Port: 443})),
			"invalid host wildcard 'api.*x.example.com'"},
		{"SigningWithoutService", withPolicy(endpointPolicy(&sandboxv1.NetworkEndpoint{Host: "s3.amazonaws.com", Port: 443, CredentialSigning: "sigv4"})),
			"has credential_signing set but signing_service is empty"},
		{"MiddlewareWithoutSelector", withPolicy(func(p *sandboxv1.SandboxPolicy) {
			p.NetworkMiddlewares = map[string]*sandboxv1.NetworkMiddlewareConfig{"audit": {Middleware: "builtin.audit"}}
		}), "middleware config 'audit' is invalid: endpoint selector is required"},
		{"OversizedPolicy", withPolicy(func(p *sandboxv1.SandboxPolicy) { p.Filesystem.ReadOnly = repeat(200, "/"+strings.Repeat("b", 1500)) }),
			"policy serialized size exceeds maximum ("},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t)
			name := "pol-" + strings.ToLower(tc.name)
			if len(name) > 19 {
				name = name[:19]
			}
			_, err := c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: name, Spec: tc.spec})
			wantStatus(t, err, codes.InvalidArgument, tc.msg)
			// The e2e test's shape: no name, the gateway picks one.
			_, err = c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: tc.spec})
			wantStatus(t, err, codes.InvalidArgument, tc.msg)

			_, err = c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: name})
			wantStatus(t, err, codes.NotFound, "sandbox not found")
			list, err := c.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{AllWorkspaces: true})
			if err != nil || len(list.GetSandboxes()) != 0 {
				t.Fatalf("ListSandboxes after a refused create = %v, %v; want none", list.GetSandboxes(), err)
			}
			ents, err := os.ReadDir(g.Root)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if e.Name() != ".gateway" {
					t.Errorf("%s in the gateway root after a refused create", e.Name())
				}
			}
			if recs, _ := filepath.Glob(filepath.Join(g.Root, ".gateway", "*.pb")); len(recs) != 0 {
				t.Errorf("records %v after a refused create", recs)
			}
		})
	}
}

// fullPolicy sets a field of every kind the proto models, and a field it
// does not (as a newer upstream's would be): unknown field 99 of the
// policy.
func fullPolicy(t testing.TB) *sandboxv1.SandboxPolicy {
	t.Helper()
	p := safePolicy()
	strict := true
	p.NetworkPolicies = map[string]*sandboxv1.NetworkPolicyRule{
		"github": {
			Name: "github",
			Endpoints: []*sandboxv1.NetworkEndpoint{{
				Host: "api.github.com", Port: 443, Protocol: "rest", Tls: "terminate", Enforcement: "enforce", Access: "read-write",
				Rules:                   []*sandboxv1.L7Rule{{Allow: &sandboxv1.L7Allow{Method: "GET", Path: "/repos/**", Query: map[string]*sandboxv1.L7QueryMatcher{"page": {Glob: "*"}}}}},
				DenyRules:               []*sandboxv1.L7DenyRule{{Method: "DELETE", Path: "/**", Params: map[string]*sandboxv1.L7QueryMatcher{"x": {Any: []string{"a", "b"}}}}},
				GraphqlPersistedQueries: map[string]*sandboxv1.GraphqlOperation{"h": {OperationType: "query", OperationName: "Q", Fields: []string{"f"}}},
				Mcp:                     &sandboxv1.McpOptions{StrictToolNames: &strict},
				CredentialBinding:       &sandboxv1.NetworkCredentialBinding{Provider: "gh"},
			}},
			Binaries: []*sandboxv1.NetworkBinary{{Path: "/usr/bin/git"}},
		},
		"pypi": {Endpoints: []*sandboxv1.NetworkEndpoint{{Host: "*.pythonhosted.org", Ports: []uint32{443, 80}, AllowedIps: []string{"10.0.0.0/8"}}}},
	}
	cfg, err := structpb.NewStruct(map[string]any{"level": "info", "n": 3.0})
	if err != nil {
		t.Fatal(err)
	}
	p.NetworkMiddlewares = map[string]*sandboxv1.NetworkMiddlewareConfig{
		"audit": {Name: "audit", Middleware: "builtin.audit", Config: cfg, OnError: "fail_open", Order: 1,
			Endpoints: &sandboxv1.MiddlewareEndpointSelector{Include: []string{"api.github.com"}}},
	}
	unknown := protowire.AppendTag(nil, 99, protowire.BytesType)
	unknown = protowire.AppendString(unknown, "a field of a newer upstream")
	p.ProtoReflect().SetUnknown(unknown)
	return p
}

// TestPolicyStored: a valid policy comes back as it was sent from Create,
// Get and List, and from a gateway restarted on the same root, its
// unmodelled field included. The gateway-only provider_credentialed marker
// is cleared, as upstream clears it.
func TestPolicyStored(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c, _ := rawClient(t, g)
	ctx := ctxFor(t)
	sent := fullPolicy(t)
	want := proto.Clone(sent).(*sandboxv1.SandboxPolicy)
	sent.NetworkPolicies["pypi"].Endpoints[0].ProviderCredentialed = true

	resp, err := c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Name: "pol", Spec: &openshellv1.SandboxSpec{Policy: sent}})
	if err != nil {
		t.Fatal(err)
	}
	check := func(where string, sb *openshellv1.Sandbox) {
		t.Helper()
		got := sb.GetSpec().GetPolicy()
		if !proto.Equal(got, want) {
			t.Errorf("%s: policy\n%v\nwant\n%v", where, got, want)
		}
		if u := string(got.ProtoReflect().GetUnknown()); u != string(want.ProtoReflect().GetUnknown()) {
			t.Errorf("%s: unknown policy fields %q, want %q", where, u, want.ProtoReflect().GetUnknown())
		}
		// Upstream's default main process for a spec without one.
		if cmd := sb.GetSpec().GetCommand(); len(cmd) != 2 || cmd[0] != "/bin/bash" || cmd[1] != "-l" || !sb.GetSpec().GetTty() {
			t.Errorf("%s: command %q tty %v, want [/bin/bash -l] with tty", where, cmd, sb.GetSpec().GetTty())
		}
	}
	check("CreateSandbox", resp.GetSandbox())
	readBack := func(c openshellv1.OpenShellClient, when string) {
		t.Helper()
		got, err := c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "pol"})
		if err != nil {
			t.Fatal(err)
		}
		check("GetSandbox "+when, got.GetSandbox())
		list, err := c.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{})
		if err != nil || len(list.GetSandboxes()) != 1 {
			t.Fatalf("ListSandboxes %s = %v, %v", when, list, err)
		}
		check("ListSandboxes "+when, list.GetSandboxes()[0])
	}
	readBack(c, "")
	waitPhase(t, c, "pol", phaseReady) // a phase change rewrites the record
	g2 := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{Root: g.Root}})
	c2, _ := rawClient(t, g2)
	readBack(c2, "after a restart")
}

// TestOldJSONRecordLoads: a record stored as protojson by an older gateway
// is read, and rewritten in the binary form at its next change.
func TestOldJSONRecordLoads(t *testing.T) {
	root := t.TempDir()
	old := &openshellv1.Sandbox{
		Metadata: &datamodelv1.ObjectMeta{Id: "3f0e6b1c-1111-4222-8333-444455556666", Name: "old", Workspace: "default", CreatedAtMs: 1},
		Spec:     &openshellv1.SandboxSpec{Policy: safePolicy()},
		Status:   &openshellv1.SandboxStatus{SandboxName: "old", Phase: phaseReady},
	}
	b, err := protojson.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, ".gateway"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "old"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, ".gateway", "old.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{Root: root}})
	c, _ := rawClient(t, g)
	got, err := c.GetSandbox(ctxFor(t), &openshellv1.GetSandboxRequest{Name: "old"})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.GetSandbox().GetSpec().GetPolicy(), safePolicy()) || got.GetSandbox().GetMetadata().GetId() != old.GetMetadata().GetId() {
		t.Fatalf("old record read as %v", got.GetSandbox())
	}
	// Read at start, it was rewritten in binary under its id.
	if _, err := os.Stat(filepath.Join(root, ".gateway", "old.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old JSON record still there after a start: %v", err)
	}
	id := old.GetMetadata().GetId()
	if _, err := os.Stat(filepath.Join(root, ".gateway", id+".pb")); err != nil {
		t.Errorf("no binary record after a start: %v", err)
	}
	stop(t, c, "old")
	if _, err := os.Stat(filepath.Join(root, ".gateway", id+".pb")); err != nil {
		t.Errorf("no binary record after a change: %v", err)
	}
	if _, err := c.DeleteSandbox(ctxFor(t), &openshellv1.DeleteSandboxRequest{Name: "old"}); err != nil {
		t.Fatal(err)
	}
	if recs, _ := filepath.Glob(filepath.Join(root, ".gateway", id+".*")); len(recs) != 0 {
		t.Errorf("records %v after delete", recs)
	}
}
