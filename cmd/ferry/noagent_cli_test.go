package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/transfer/agent"
)

// TestNoAgentBuildCLI is a ferry installed with `go install` (no agent
// embedded): auto mode moves files in POSIX mode and says so once, on
// stderr, with how to get agent mode; --mode agent fails saying the same;
// --mode posix and -q say nothing.
func TestNoAgentBuildCLI(t *testing.T) {
	activeGateway(t)
	wantOK(t, runFerry(t, nil, "sandbox", "create", "box", "-q"))
	old := agentBundle
	agentBundle = func() (agent.Bundle, error) { return agent.Bundle{}, nil }
	t.Cleanup(func() { agentBundle = old })

	src := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(src, []byte("no agent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runFerry(t, nil, "--json", "cp", src, "box:f")
	if r.code != 0 || r.stderr != noAgentNotice {
		t.Fatalf("auto mode: exit %d, stderr %q; want exit 0 and exactly the notice", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, `"mode":"posix"`) {
		t.Fatalf("auto mode did not move in POSIX mode: %s", r.stdout)
	}
	if !strings.Contains(noAgentNotice, "make build") || strings.Count(noAgentNotice, "\n") != 1 {
		t.Fatalf("the notice must be one line saying how to get agent mode: %q", noAgentNotice)
	}
	wantFailure(t, runFerry(t, nil, "--mode", "agent", "cp", src, "box:g"), "carries no agent", "make build")
	wantOK(t, runFerry(t, nil, "-q", "--mode", "posix", "cp", src, "box:h"))
	if r := runFerry(t, nil, "--mode", "posix", "cp", src, "box:j"); r.code != 0 || strings.Contains(r.stderr, "carries no agent") {
		t.Fatalf("--mode posix: exit %d, stderr %q; want no notice", r.code, r.stderr)
	}
	wantOK(t, runFerry(t, nil, "-q", "cp", src, "box:i"))
	back := filepath.Join(t.TempDir(), "back")
	wantOK(t, runFerry(t, nil, "-q", "cp", "box:f", back))
	if b, err := os.ReadFile(back); err != nil || string(b) != "no agent\n" {
		t.Fatalf("copied back %q, %v", b, err)
	}
}
