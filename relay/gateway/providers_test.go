package gateway_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	datamodelv1 "github.com/ferry-dev/ferry/proto/openshell/datamodel/v1"
	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
)

func providerReq(name, typ string, creds map[string]string) *openshellv1.CreateProviderRequest {
	return &openshellv1.CreateProviderRequest{Provider: &datamodelv1.Provider{
		Metadata: &datamodelv1.ObjectMeta{Name: name}, Type: typ, Credentials: creds,
	}}
}

// TestProviderRoundTrip: create, get, list, update and delete a provider
// as upstream answers them: every credential value REDACTED in every
// answer, the record 0600 and kept across a restart, the secret in no log.
func TestProviderRoundTrip(t *testing.T) {
	const secret = "ghp-roundtrip-secret-41d7"
	root := t.TempDir()
	g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{Root: root}})
	c, _ := rawClient(t, g)
	ctx := ctxFor(t)

	created, err := c.CreateProvider(ctx, providerReq("gh", "github", map[string]string{"GITHUB_TOKEN": secret}))
	if err != nil {
		t.Fatal(err)
	}
	p := created.GetProvider()
	if p.GetMetadata().GetId() == "" || p.GetMetadata().GetWorkspace() != "default" || p.GetMetadata().GetResourceVersion() != 1 ||
		p.GetCredentials()["GITHUB_TOKEN"] != "REDACTED" || p.GetType() != "github" {
		t.Fatalf("created %v", p)
	}
	got, err := c.GetProvider(ctx, &openshellv1.GetProviderRequest{Name: "gh"})
	if err != nil || got.GetProvider().GetCredentials()["GITHUB_TOKEN"] != "REDACTED" || got.GetProvider().GetMetadata().GetId() != p.GetMetadata().GetId() {
		t.Fatalf("get: %v, %v", got, err)
	}
	if _, err := c.CreateProvider(ctx, providerReq("claude-code", "claude-code", map[string]string{"ANTHROPIC_API_KEY": "k"})); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListProviders(ctx, &openshellv1.ListProvidersRequest{})
	if err != nil || len(list.GetProviders()) != 2 || list.GetProviders()[0].GetMetadata().GetName() != "gh" {
		t.Fatalf("list: %v, %v", list, err)
	}
	for _, lp := range list.GetProviders() {
		for k, v := range lp.GetCredentials() {
			if v != "REDACTED" {
				t.Errorf("list shows %s of %s", k, lp.GetMetadata().GetName())
			}
		}
	}
	if pg, _ := c.ListProviders(ctx, &openshellv1.ListProvidersRequest{Offset: 1, Limit: 5}); len(pg.GetProviders()) != 1 || pg.GetProviders()[0].GetMetadata().GetName() != "claude-code" {
		t.Errorf("second page %v", pg)
	}

	// Update merges: a new key, an empty value removes one, the type
	// may not change, a stale resource_version is ABORTED.
	up, err := c.UpdateProvider(ctx, &openshellv1.UpdateProviderRequest{Provider: &datamodelv1.Provider{
		Metadata: &datamodelv1.ObjectMeta{Name: "gh"}, Credentials: map[string]string{"GH_TOKEN": secret + "-2"}, Config: map[string]string{"host": "github.com"},
	}})
	if err != nil || up.GetProvider().GetMetadata().GetResourceVersion() != 2 || len(up.GetProvider().GetCredentials()) != 2 || up.GetProvider().GetCredentials()["GH_TOKEN"] != "REDACTED" {
		t.Fatalf("update: %v, %v", up, err)
	}
	_, err = c.UpdateProvider(ctx, &openshellv1.UpdateProviderRequest{Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: "gh"}, Type: "gitlab"}})
	wantStatus(t, err, codes.InvalidArgument, "provider type cannot be changed; delete and recreate the provider")
	_, err = c.UpdateProvider(ctx, &openshellv1.UpdateProviderRequest{Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: "gh", ResourceVersion: 1}}})
	wantStatus(t, err, codes.Aborted, "provider was modified concurrently (current resource_version: 2)")
	_, err = c.UpdateProvider(ctx, &openshellv1.UpdateProviderRequest{Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: "nope"}}})
	wantStatus(t, err, codes.NotFound, "provider not found")
	if _, err := c.UpdateProvider(ctx, &openshellv1.UpdateProviderRequest{Provider: &datamodelv1.Provider{
		Metadata: &datamodelv1.ObjectMeta{Name: "gh"}, Credentials: map[string]string{"GH_TOKEN": ""},
	}}); err != nil {
		t.Fatal(err)
	}

	// On disk: one record per provider, 0600, holding the value; a
	// restarted gateway knows it.
	recs, _ := filepath.Glob(filepath.Join(root, ".gateway", "providers", "*.pb"))
	if len(recs) != 2 {
		t.Fatalf("records %v", recs)
	}
	for _, rec := range recs {
		if fi, err := os.Stat(rec); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v", rec, fi.Mode(), err)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, ".gateway", "providers")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("provider dir: %v, %v", fi.Mode(), err)
	}
	srv, err := gateway.New(gateway.Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	again, err := srv.GetProvider(ctx, &openshellv1.GetProviderRequest{Name: "gh"})
	srv.Close()
	if err != nil || again.GetProvider().GetMetadata().GetResourceVersion() != 3 || len(again.GetProvider().GetCredentials()) != 1 || again.GetProvider().GetConfig()["host"] != "github.com" {
		t.Fatalf("after restart: %v, %v", again, err)
	}

	del, err := c.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Name: "gh"})
	if err != nil || !del.GetDeleted() {
		t.Fatalf("delete: %v, %v", del, err)
	}
	// Upstream answers a second delete deleted=false, not NOT_FOUND.
	if del, err := c.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Name: "gh"}); err != nil || del.GetDeleted() {
		t.Fatalf("second delete: %v, %v", del, err)
	}
	_, err = c.GetProvider(ctx, &openshellv1.GetProviderRequest{Name: "gh"})
	wantStatus(t, err, codes.NotFound, "provider not found")
	if recs, _ := filepath.Glob(filepath.Join(root, ".gateway", "providers", "*.pb")); len(recs) != 1 {
		t.Errorf("records after delete %v", recs)
	}
	if strings.Contains(g.Seen.String(), secret) {
		t.Error("the gateway logged a credential")
	}
}

// TestProviderRefusals: upstream's checks of CreateProvider, Get, List
// and Delete, each with its code and message.
func TestProviderRefusals(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c, _ := rawClient(t, g)
	ctx := ctxFor(t)
	if _, err := c.CreateProvider(ctx, providerReq("taken", "github", map[string]string{"T": "v"})); err != nil {
		t.Fatal(err)
	}
	many := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m["K"+strings.Repeat("x", i)] = "v"
		}
		return m
	}
	one := map[string]string{"T": "v"}
	for _, tc := range []struct {
		name string
		req  *openshellv1.CreateProviderRequest
		code codes.Code
		msg  string
	}{
		{"NoProvider", &openshellv1.CreateProviderRequest{}, codes.InvalidArgument, "provider is required"},
		{"NoType", providerReq("a", "  ", one), codes.InvalidArgument, "provider.type is required"},
		{"NoCredentials", providerReq("a", "github", nil), codes.InvalidArgument, "provider.credentials must not be empty"},
		{"Handles", &openshellv1.CreateProviderRequest{Provider: &datamodelv1.Provider{Type: "github", Credentials: one, CredentialHandles: map[string]*datamodelv1.CredentialHandle{"T": {Driver: "d", Handle: "h"}}}}, codes.InvalidArgument, "provider.credential_handles is internal gateway state and cannot be supplied"},
		{"ProfileWorkspace", &openshellv1.CreateProviderRequest{Provider: &datamodelv1.Provider{Type: "github", Credentials: one, ProfileWorkspace: "other"}}, codes.InvalidArgument, "profile_workspace must be empty (global) or match the provider workspace"},
		{"NameLength", providerReq(strings.Repeat("n", 254), "github", one), codes.InvalidArgument, "provider.name exceeds maximum length (254 > 253)"},
		{"TypeLength", providerReq("a", strings.Repeat("t", 65), one), codes.InvalidArgument, "provider.type exceeds maximum length (65 > 64)"},
		{"Credentials", providerReq("a", "github", many(33)), codes.InvalidArgument, "provider.credentials exceeds maximum entries (33 > 32)"},
		{"CredentialValue", providerReq("a", "github", map[string]string{"T": strings.Repeat("v", 8193)}), codes.InvalidArgument, "provider.credentials value exceeds maximum length (8193 > 8192)"},
		{"Label", &openshellv1.CreateProviderRequest{Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: "a", Labels: map[string]string{"k": "bad value"}}, Type: "github", Credentials: one}}, codes.InvalidArgument, "label value"},
		{"Exists", providerReq("taken", "github", one), codes.AlreadyExists, "provider already exists"},
		{"NoWorkspace", &openshellv1.CreateProviderRequest{Workspace: "nowhere", Provider: &datamodelv1.Provider{Type: "github", Credentials: one}}, codes.NotFound, "workspace 'nowhere' not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CreateProvider(ctx, tc.req)
			wantStatus(t, err, tc.code, tc.msg)
		})
	}
	// A provider created without a name gets upstream's six letters.
	anon, err := c.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Provider: &datamodelv1.Provider{Type: "github", Credentials: one}})
	if err != nil || len(anon.GetProvider().GetMetadata().GetName()) != 6 {
		t.Fatalf("unnamed: %v, %v", anon, err)
	}
	_, err = c.GetProvider(ctx, &openshellv1.GetProviderRequest{})
	wantStatus(t, err, codes.InvalidArgument, "name is required")
	_, err = c.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{})
	wantStatus(t, err, codes.InvalidArgument, "name is required")
	_, err = c.ListProviders(ctx, &openshellv1.ListProvidersRequest{AllWorkspaces: true, Workspace: "default"})
	wantStatus(t, err, codes.InvalidArgument, "all_workspaces and workspace are mutually exclusive")
	list, err := c.ListProviders(ctx, &openshellv1.ListProvidersRequest{})
	if err != nil || len(list.GetProviders()) != 2 {
		t.Fatalf("after the refusals: %v, %v; want taken and the unnamed one", list, err)
	}
}

// TestSandboxProviders: CreateSandbox refuses a provider its workspace
// does not hold with upstream's FAILED_PRECONDITION, and two that inject
// one variable; a provider a sandbox attaches cannot be deleted, nor
// its workspace while it exists.
func TestSandboxProviders(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c, _ := rawClient(t, g)
	ctx := ctxFor(t)
	sbReq := func(name, ws string, providers ...string) *openshellv1.CreateSandboxRequest {
		return &openshellv1.CreateSandboxRequest{Name: name, Workspace: ws, Spec: &openshellv1.SandboxSpec{Providers: providers}}
	}
	_, err := c.CreateSandbox(ctx, sbReq("box", "", "nope"))
	wantStatus(t, err, codes.FailedPrecondition, "provider 'nope' not found")
	for _, p := range []*openshellv1.CreateProviderRequest{
		providerReq("gh", "github", map[string]string{"GITHUB_TOKEN": "a"}),
		providerReq("gh2", "github", map[string]string{"GITHUB_TOKEN": "b"}),
		providerReq("claude", "claude-code", map[string]string{"ANTHROPIC_API_KEY": "c"}),
	} {
		if _, err := c.CreateProvider(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.CreateSandbox(ctx, sbReq("box", "", "gh", "gh2"))
	wantStatus(t, err, codes.FailedPrecondition, "credential env key 'GITHUB_TOKEN' is provided by both provider 'gh' and provider 'gh2'; use provider-specific env names")
	// Another workspace's provider of that name is not this one's.
	if _, err := c.CreateWorkspace(ctx, &openshellv1.CreateWorkspaceRequest{Name: "team"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateSandbox(ctx, sbReq("box", "team", "gh"))
	wantStatus(t, err, codes.FailedPrecondition, "provider 'gh' not found")
	if list, _ := c.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{AllWorkspaces: true}); len(list.GetSandboxes()) != 0 {
		t.Fatalf("refused creates left %v", list.GetSandboxes())
	}

	createReady(t, c, sbReq("box", "", "gh", "claude"))
	createReady(t, c, sbReq("box2", "", "gh"))
	_, err = c.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Name: "gh"})
	wantStatus(t, err, codes.FailedPrecondition, "provider 'gh' is attached to sandbox(es): box, box2")
	// An update that would make two attached providers inject one
	// variable is refused too.
	_, err = c.UpdateProvider(ctx, &openshellv1.UpdateProviderRequest{Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: "claude"}, Credentials: map[string]string{"GITHUB_TOKEN": "x"}}})
	wantStatus(t, err, codes.FailedPrecondition, "provider update would create credential env key conflict on sandbox 'box'")
	for _, name := range []string{"box", "box2"} {
		if _, err := c.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	if del, err := c.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Name: "gh"}); err != nil || !del.GetDeleted() {
		t.Fatalf("delete once detached: %v, %v", del, err)
	}

	// A workspace that holds a provider is not deleted.
	if _, err := c.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Workspace: "team", Provider: &datamodelv1.Provider{Metadata: &datamodelv1.ObjectMeta{Name: "gh"}, Type: "github", Credentials: map[string]string{"T": "v"}}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.DeleteWorkspace(ctx, &openshellv1.DeleteWorkspaceRequest{Name: "team"})
	wantStatus(t, err, codes.FailedPrecondition, "workspace 'team' still contains resources: provider")
	// TERMINATING now: it takes no new provider.
	_, err = c.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Workspace: "team", Provider: &datamodelv1.Provider{Type: "github", Credentials: map[string]string{"T": "v"}}})
	wantStatus(t, err, codes.FailedPrecondition, "workspace 'team' is being deleted")
	if _, err := c.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Name: "gh", Workspace: "team"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteWorkspace(ctx, &openshellv1.DeleteWorkspaceRequest{Name: "team"}); err != nil {
		t.Fatal(err)
	}
}
