package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// createProviders creates a provider of each name, its type the name, as
// a user would: `ferry provider create NAME --type NAME --credential
// NAME_TOKEN` with the value in ferry's environment.
func createProviders(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		k := strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_TOKEN"
		t.Setenv(k, "test-"+name)
		wantOK(t, runFerry(t, nil, "-q", "provider", "create", name, "--type", name, "--credential", k))
	}
}

var providerCreated = regexp.MustCompile(`"created":"[^"]*"`)

// normalizeProviderJSON checks a provider's id and creation time and
// replaces them with placeholders.
func normalizeProviderJSON(t *testing.T, out string) string {
	t.Helper()
	var ps []providerJSON
	trimmed := strings.TrimSpace(out)
	if strings.HasPrefix(trimmed, "[") {
		if err := json.Unmarshal([]byte(trimmed), &ps); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
	} else {
		var p providerJSON
		if err := json.Unmarshal([]byte(trimmed), &p); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		if !uuidRE.MatchString(p.ID) || p.Created == "" {
			t.Fatalf("provider %s: id %q created %q", p.Name, p.ID, p.Created)
		}
	}
	return providerCreated.ReplaceAllString(idField.ReplaceAllString(out, `"id":"ID"`), `"created":"TIME"`)
}

// TestProviderCLI drives provider create, get, list and delete through
// the embedded gateway: the credential's value comes from ferry's
// environment and is never printed or logged; a sandbox may attach only a
// provider that exists, which it then keeps from deletion.
func TestProviderCLI(t *testing.T) {
	g := activeGateway(t)
	const secret = "ghp-provider-cli-secret-9c2e"
	t.Setenv("GITHUB_TOKEN", secret)
	t.Setenv("GH_ENTERPRISE_TOKEN", secret+"-ent")

	r := runFerry(t, nil, "--json", "provider", "create", "gh", "--type", "github",
		"--credential", "GITHUB_TOKEN", "--credential", "GH_ENTERPRISE_TOKEN", "--config", "host=github.com")
	wantOK(t, r)
	golden(t, "json/provider-create.golden", normalizeProviderJSON(t, r.stdout))
	r = runFerry(t, nil, "--json", "provider", "get", "gh")
	wantOK(t, r)
	golden(t, "json/provider-create.golden", normalizeProviderJSON(t, r.stdout))
	createProviders(t, "anthropic")
	r = runFerry(t, nil, "--json", "provider", "list")
	wantOK(t, r)
	golden(t, "json/provider-list.golden", normalizeProviderJSON(t, r.stdout))
	r = runFerry(t, nil, "provider", "list")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "GH_ENTERPRISE_TOKEN,GITHUB_TOKEN") || !strings.HasPrefix(r.stdout, "NAME") {
		t.Errorf("list table %q", r.stdout)
	}

	// Refusals: a value on the command line (not echoed), an unset
	// variable, no credential, no type, a name taken.
	r = runFerry(t, nil, "provider", "create", "x", "--type", "github", "--credential", "GITHUB_TOKEN="+secret)
	wantUsage(t, r, "never from the command line")
	if strings.Contains(r.stderr, secret) {
		t.Errorf("the refusal repeats the secret: %q", r.stderr)
	}
	wantFailure(t, runFerry(t, nil, "provider", "create", "x", "--type", "github", "--credential", "FERRY_TEST_UNSET_VAR"), "requires local env var 'FERRY_TEST_UNSET_VAR'")
	wantUsage(t, runFerry(t, nil, "provider", "create", "x", "--type", "github"), "at least one --credential")
	wantUsage(t, runFerry(t, nil, "provider", "create", "x", "--credential", "GITHUB_TOKEN"), "--type")
	wantFailure(t, runFerry(t, nil, "provider", "create", "gh", "--type", "github", "--credential", "GITHUB_TOKEN"), "create provider gh", "provider already exists")
	wantFailure(t, runFerry(t, nil, "provider", "get", "nope"), "get provider nope", "provider not found")

	// A sandbox attaches only a provider that exists: the gateway's
	// refusal names it, and nothing is created.
	wantFailure(t, runFerry(t, nil, "sandbox", "create", "box", "--provider", "gh", "--provider", "nope"), "create sandbox box", "provider not found: nope")
	wantFailure(t, runFerry(t, nil, "sandbox", "get", "box"), "not found")
	wantOK(t, runFerry(t, nil, "-q", "sandbox", "create", "box", "--provider", "gh"))
	wantFailure(t, runFerry(t, nil, "provider", "delete", "gh"), "delete provider gh", "provider in use", "attached to sandbox(es): box")
	wantOK(t, runFerry(t, nil, "-q", "sandbox", "delete", "box"))
	r = runFerry(t, nil, "--json", "provider", "delete", "gh")
	wantOK(t, r)
	if strings.TrimSpace(r.stdout) != `{"deleted":true,"name":"gh"}` {
		t.Errorf("delete printed %q", r.stdout)
	}
	wantFailure(t, runFerry(t, nil, "provider", "delete", "gh"), "delete provider gh", "provider not found")

	// The secret reached the gateway's record only, and came back nowhere.
	if strings.Contains(g.Seen.String(), secret) {
		t.Error("the gateway logged a credential")
	}
}
