package openshell_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
)

// TestProviders: CreateProvider, Provider, Providers and DeleteProvider
// through the embedded gateway, with each refusal's sentinel; a sandbox
// that attaches an unknown provider is ErrProviderNotFound naming it, and
// the credential value never comes back.
func TestProviders(t *testing.T) {
	const secret = "ghp-client-secret-0b5a"
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	ctx := ctxFor(t)

	p, err := c.CreateProvider(ctx, openshell.ProviderSpec{Name: "gh", Type: "github",
		Credentials: map[string]string{"GITHUB_TOKEN": secret, "GH_TOKEN": secret}, Config: map[string]string{"host": "github.com"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "gh" || p.Type != "github" || p.Workspace != "default" || p.ID == "" || p.Created.IsZero() ||
		strings.Join(p.CredentialKeys, ",") != "GH_TOKEN,GITHUB_TOKEN" || p.Config["host"] != "github.com" {
		t.Fatalf("created %+v", p)
	}
	if got, err := c.Provider(ctx, "gh"); err != nil || got.ID != p.ID || strings.Join(got.CredentialKeys, ",") != "GH_TOKEN,GITHUB_TOKEN" {
		t.Fatalf("get: %+v, %v", got, err)
	}
	// The wire answer holds no value: upstream's REDACTED.
	resp, err := openshell.API(c).GetProvider(ctx, &openshellv1.GetProviderRequest{Name: "gh"})
	if err != nil || strings.Contains(resp.String(), secret) {
		t.Fatalf("GetProvider: %v, %v", resp, err)
	}
	if _, err := c.CreateProvider(ctx, openshell.ProviderSpec{Name: "gh", Type: "github", Credentials: map[string]string{"X": "y"}}); !errors.Is(err, openshell.ErrProviderExists) {
		t.Errorf("second create: %v, want ErrProviderExists", err)
	}
	if _, err := c.CreateProvider(ctx, openshell.ProviderSpec{Name: "x", Type: "github"}); !errors.Is(err, openshell.ErrInvalidRequest) || !strings.Contains(err.Error(), "provider.credentials must not be empty") {
		t.Errorf("no credentials: %v, want ErrInvalidRequest", err)
	}
	if _, err := c.Provider(ctx, "nope"); !errors.Is(err, openshell.ErrProviderNotFound) {
		t.Errorf("get nope: %v, want ErrProviderNotFound", err)
	}

	_, err = c.Create(ctx, openshell.Spec{Name: "box", Providers: []string{"gh", "nope"}})
	if !errors.Is(err, openshell.ErrProviderNotFound) || !strings.Contains(err.Error(), "create sandbox box") || !strings.HasSuffix(err.Error(), ": nope") {
		t.Fatalf("create with an unknown provider: %v", err)
	}
	if _, err := c.Ensure(ctx, openshell.Spec{Name: "box", Providers: []string{"nope"}}); !errors.Is(err, openshell.ErrProviderNotFound) {
		t.Fatalf("ensure with an unknown provider: %v", err)
	}
	if _, err := c.Create(ctx, openshell.Spec{Name: "box", Providers: []string{"gh"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteProvider(ctx, "gh"); !errors.Is(err, openshell.ErrProviderInUse) || !strings.Contains(err.Error(), "box") {
		t.Fatalf("delete attached: %v, want ErrProviderInUse naming box", err)
	}
	if err := c.Delete(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteProvider(ctx, "gh"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteProvider(ctx, "gh"); !errors.Is(err, openshell.ErrProviderNotFound) {
		t.Errorf("second delete: %v, want ErrProviderNotFound", err)
	}
	if all, err := c.Providers(ctx); err != nil || len(all) != 0 {
		t.Errorf("providers after delete: %v, %v", all, err)
	}
}

// TestProvidersPages: Providers reads every page of a list longer than
// one.
func TestProvidersPages(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Plaintext: true})
	c := g.Client(t, openshell.Config{})
	ctx := ctxFor(t)
	names := make([]string, 130)
	for i := range names {
		names[i] = "p" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	g.Providers(t, c, names...)
	all, err := c.Providers(ctx)
	if err != nil || len(all) != len(names) {
		t.Fatalf("providers: %d, %v; want %d", len(all), err, len(names))
	}
}

// FuzzMissingProvider: any gateway message read as the unknown-provider
// refusal is exactly upstream's form around the name it returns, and no
// other code is read as one.
func FuzzMissingProvider(f *testing.F) {
	for _, s := range []string{"provider 'gh' not found", "provider '' not found", "provider 'a' not found' not found", "provider not found", "provider '"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		name, ok := openshell.MissingProvider(status.Error(codes.FailedPrecondition, msg))
		if ok != (strings.HasPrefix(msg, "provider '") && strings.HasSuffix(msg, "' not found") && len(msg) >= len("provider '' not found")) {
			t.Fatalf("%q: ok %v", msg, ok)
		}
		if ok && "provider '"+name+"' not found" != status.Convert(status.Error(codes.FailedPrecondition, msg)).Message() {
			t.Fatalf("%q: name %q", msg, name)
		}
		if _, ok := openshell.MissingProvider(status.Error(codes.NotFound, msg)); ok {
			t.Fatalf("%q: NOT_FOUND read as an unknown provider", msg)
		}
	})
}
