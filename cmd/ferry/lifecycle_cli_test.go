package main

import (
	"strings"
	"testing"
)

// TestSandboxStopStart stops and starts a sandbox through the CLI: a
// stopped sandbox runs nothing, and its files are there once it is started.
func TestSandboxStopStart(t *testing.T) {
	activeGateway(t)
	wantOK(t, runFerry(t, nil, "--quiet", "sandbox", "create", "box"))
	wantOK(t, runFerry(t, nil, "exec", "box", "--", "sh", "-c", "echo kept > f"))

	r := runFerry(t, nil, "--json", "sandbox", "stop", "box")
	wantOK(t, r)
	if !strings.Contains(r.stdout, `"name":"box"`) || !strings.Contains(r.stdout, `"phase":"stopped"`) {
		t.Fatalf("stop printed %q, want box stopped", r.stdout)
	}
	// Stopping twice is not an error, as upstream.
	wantOK(t, runFerry(t, nil, "--quiet", "sandbox", "stop", "box"))
	r = runFerry(t, nil, "exec", "box", "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, "not ready") {
		t.Fatalf("exec in a stopped sandbox: exit %d, stderr %q; want a not-ready failure", r.code, r.stderr)
	}

	r = runFerry(t, nil, "sandbox", "start", "box")
	wantOK(t, r)
	if lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); len(lines) != 2 || !strings.Contains(lines[1], " ready ") {
		t.Fatalf("start printed %q, want box ready", r.stdout)
	}
	r = runFerry(t, nil, "exec", "box", "--", "cat", "f")
	wantOK(t, r)
	if r.stdout != "kept\n" {
		t.Errorf("file after stop and start holds %q, want %q", r.stdout, "kept\n")
	}

	wantFailure(t, runFerry(t, nil, "sandbox", "stop", "nosuch"), "nosuch", "not found")
	wantFailure(t, runFerry(t, nil, "sandbox", "start", "nosuch"), "nosuch", "not found")
}
