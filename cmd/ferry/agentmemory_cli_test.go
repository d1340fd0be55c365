package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
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

// TestRecreatedSandboxCLI: a sandbox deleted and created again under its
// name, by a ferry that shares no cache with this one, leaves this one a
// stale sandbox id and a remembered agent that is not there. The next
// command's first exec, whose stdin (the agent's hello and first call, or
// what `ferry exec` is given) left with it, is refused for the id; the
// retry on the new id gets that stdin again, whole.
func TestRecreatedSandboxCLI(t *testing.T) {
	g := activeGateway(t)
	cache := os.Getenv("XDG_CACHE_HOME")
	recreate := func(word string) {
		t.Helper()
		t.Setenv("XDG_CACHE_HOME", t.TempDir()) // another ferry's cache
		wantOK(t, runFerry(t, nil, "sandbox", "delete", "box"))
		wantOK(t, runFerry(t, nil, "sandbox", "create", "-q", "-e", "TMPDIR="+t.TempDir(), "box"))
		t.Setenv("XDG_CACHE_HOME", cache)
		writeFile(t, filepath.Join(g.Root, "box", "f"), []byte(word), 0o644)
	}
	download := func(want string) {
		t.Helper()
		dst := t.TempDir()
		wantOK(t, runFerry(t, nil, "-q", "cp", "box:f", dst+"/"))
		if b, err := os.ReadFile(filepath.Join(dst, "f")); err != nil || string(b) != want {
			t.Fatalf("copied %q, %v; want %q", b, err, want)
		}
	}
	const exec = "/openshell.v1.OpenShell/ExecSandboxInteractive"

	wantOK(t, runFerry(t, nil, "sandbox", "create", "-q", "-e", "TMPDIR="+t.TempDir(), "box"))
	writeFile(t, filepath.Join(g.Root, "box", "f"), []byte("first"), 0o644)
	download("first")

	recreate("second")
	before := g.Calls(exec)
	download("second")
	if n := g.Calls(exec) - before; n < 2 {
		t.Fatalf("%d execs for the copy after the sandbox was recreated, want the stale id's and more", n)
	}

	recreate("third")
	// ferry exec's first exec is the command's, stdin and all.
	data := bytes.Repeat([]byte("piped through a stale id\n"), 20<<10) // past what goes before the headers
	wantOK(t, runFerry(t, bytes.NewReader(data), "exec", "box", "--", "sh", "-c", "cat >up"))
	if b, err := os.ReadFile(filepath.Join(g.Root, "box", "up")); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("piped %d bytes, %v; want %d", len(b), err, len(data))
	}
}

// TestRememberedAgentGoneCLI: the sandbox is recreated under its name (by
// another ferry) where no agent can be installed. The next copy, whose
// early exec meets a stale id and then no agent, is done in POSIX mode,

// TestRememberedAgentGoneCLI: a sandbox remembered for its agent, deleted
// and recreated by another ferry (another cache) where no agent can be
// installed: each command (a copy, a session's save and restore, a run)
// meets the stale id, replays its early stdin, finds no agent and a failed
// install, and is done in POSIX mode; the memory forgets the sandbox.
func TestRememberedAgentGoneCLI(t *testing.T) {
	g := activeGateway(t)
	t.Setenv("FERRY_STORE", t.TempDir())
	memory := filepath.Join(os.Getenv("XDG_CACHE_HOME"), "ferry", "agents")
	for _, tc := range []struct {
		name string
		argv func(box string) []string
		// check is what the command left, beside its JSON.
		check func(t *testing.T, box string)
	}{
		{"cp", func(box string) []string { return []string{"cp", box + ":f", t.TempDir() + "/" + box} },
			func(t *testing.T, box string) {}},
		{"session save", func(box string) []string { return []string{"session", "save", box + ":sess", box + "-again"} },
			func(t *testing.T, box string) {
				wantOK(t, runFerry(t, nil, "-q", "--mode", "posix", "session", "restore", box+"-again", box+":check"))
				if b, err := os.ReadFile(filepath.Join(g.Root, box, "check", "a")); err != nil || string(b) != "second" {
					t.Fatalf("saved %q, %v; want %q", b, err, "second")
				}
			}},
		{"session restore", func(box string) []string { return []string{"session", "restore", box, box + ":restored"} },
			func(t *testing.T, box string) {
				if b, err := os.ReadFile(filepath.Join(g.Root, box, "restored", "a")); err != nil || string(b) != "first" {
					t.Fatalf("restored %q, %v; want %q", b, err, "first")
				}
			}},
		{"run", func(box string) []string {
			return []string{"run", box, "--in", filepath.Join(g.Root, box, "f") + ":in", "--out", t.TempDir(), "--follow=false", "--", "sh", "-c", "cmp in f && mkdir -p rascal-meta && echo '{}' >rascal-meta/meta.json"}
		}, func(t *testing.T, box string) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := strings.ReplaceAll(tc.name, " ", "-")
			wantOK(t, runFerry(t, nil, "sandbox", "create", "-q", "-e", "TMPDIR="+t.TempDir(), box))
			write := func(v string) {
				writeFile(t, filepath.Join(g.Root, box, "f"), []byte(v), 0o644)
				writeFile(t, filepath.Join(g.Root, box, "sess", "a"), []byte(v), 0o644)
			}
			write("first")
			wantOK(t, runFerry(t, nil, "-q", "--mode", "posix", "session", "save", box+":sess", box))
			wantOK(t, runFerry(t, nil, "-q", "cp", box+":f", t.TempDir()+"/"))
			if ents, _ := os.ReadDir(memory); len(ents) != 1 {
				t.Fatalf("%d memory entries after an agent-mode copy, want 1", len(ents))
			}

			cache := os.Getenv("XDG_CACHE_HOME")
			t.Setenv("XDG_CACHE_HOME", t.TempDir()) // another ferry's cache
			wantOK(t, runFerry(t, nil, "sandbox", "delete", box))
			// Not even root makes a directory in /proc: the install fails.
			wantOK(t, runFerry(t, nil, "sandbox", "create", "-q", "-e", "TMPDIR=/proc/ferry-none", box))
			t.Setenv("XDG_CACHE_HOME", cache)
			write("second")

			res := runFerry(t, nil, append([]string{"--json"}, tc.argv(box)...)...)
			wantOK(t, res)
			if !strings.Contains(res.stdout, `"mode":"posix"`) || strings.Contains(res.stdout, `"mode":"agent"`) {
				t.Fatalf("output %s, want it done in POSIX mode", res.stdout)
			}
			if ents, _ := os.ReadDir(memory); len(ents) != 0 {
				t.Fatalf("%d memory entries after the agent could not run, want 0", len(ents))
			}
			tc.check(t, box)
			wantOK(t, runFerry(t, nil, "sandbox", "delete", box))
		})
	}
}
