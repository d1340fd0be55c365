package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAgentMemoryCLI: a command that reached the agent remembers the
// sandbox in the cache directory, and the next command there sends its
// first call without waiting for the agent's hello; when the sandbox has
// lost its agent meanwhile, that command installs it again and still
// copies. POSIX mode remembers nothing.
func TestAgentMemoryCLI(t *testing.T) {
	g := activeGateway(t)
	tmp := t.TempDir()
	wantOK(t, runFerry(t, nil, "sandbox", "create", "-q", "-e", "TMPDIR="+tmp, "box"))
	writeFile(t, filepath.Join(g.Root, "box", "f"), []byte("remembered"), 0o644)
	memory := filepath.Join(os.Getenv("XDG_CACHE_HOME"), "ferry", "agents")
	entries := func() int {
		ents, _ := os.ReadDir(memory)
		return len(ents)
	}
	copied := func(dst string) {
		t.Helper()
		if b, err := os.ReadFile(filepath.Join(dst, "f")); err != nil || string(b) != "remembered" {
			t.Fatalf("copied %q, %v", b, err)
		}
	}

	dst := t.TempDir()
	wantOK(t, runFerry(t, nil, "-q", "--mode", "posix", "cp", "box:f", dst+"/"))
	copied(dst)
	if n := entries(); n != 0 {
		t.Fatalf("%d memory entries after a POSIX-mode copy, want 0", n)
	}
	for i, lose := range []bool{false, false, true, false} {
		if lose {
			// The sandbox's temp directory is cleaned: no agent cached.
			agents, _ := filepath.Glob(filepath.Join(tmp, ".ferry-*"))
			if len(agents) != 1 {
				t.Fatalf("agent caches %v, want 1", agents)
			}
			if err := os.RemoveAll(agents[0]); err != nil {
				t.Fatal(err)
			}
		}
		dst := t.TempDir()
		wantOK(t, runFerry(t, nil, "-q", "cp", "box:f", dst+"/"))
		copied(dst)
		if n := entries(); n != 1 {
			t.Fatalf("copy %d: %d memory entries, want 1", i, n)
		}
	}
	if agents, _ := filepath.Glob(filepath.Join(tmp, ".ferry-*", "agent-*")); len(agents) != 1 {
		t.Fatalf("cached agents after the copies: %v, want 1, installed again", agents)
	}
}
