package ferry_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/local"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// warmAgent installs the agent through a gateway without faults: the cache
// is the machine's temp dir, which every test gateway's sandboxes share.
func warmAgent(t *testing.T) {
	t.Helper()
	warm := newEnv(t, transfer.ModeAgent)
	if _, err := ferry.Upload(ctx(t), warm.sb, []string{t.TempDir()}, "warm"); err != nil {
		t.Fatal(err)
	}
}

// noiseTree writes n incompressible files under dir/tree.
func noiseTree(t *testing.T, dir string, n int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	files := map[string]string{}
	for i := 0; i < n; i++ {
		files[filepath.Join("tree", "d"+string(rune('a'+i%4)), "f"+string(rune('a'+i%26))+strings.Repeat("x", i/26))] = noise(rng, 64<<10+rng.IntN(128<<10))
	}
	write(t, dir, files)
}

// TestAgentCorruptedByte flips one byte of the exec stream (the gateway's
// fault hook) at offsets inside uploads and downloads in agent mode: each
// must fail, and nothing may be placed on either side. (POSIX mode has no
// digests of its own: there a flipped byte inside a file's data passes.)
func TestAgentCorruptedByte(t *testing.T) {
	warmAgent(t)
	local := t.TempDir()
	noiseTree(t, local, 24, 7)
	rng := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < 4; i++ {
		at := int64(64<<10 + rng.IntN(2<<20))
		t.Run("", func(t *testing.T) {
			g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{CorruptStdinAfter: at, CorruptStdoutAfter: at}})
			c := g.Client(t, openshell.Config{})
			g.Sandbox(t, c, "box")
			sb := sandboxFor(t, c, transfer.ModeAgent)
			_, err := ferry.Upload(ctx(t), sb, []string{filepath.Join(local, "tree")}, "up")
			if err == nil {
				t.Fatalf("upload with byte %d flipped succeeded", at)
			}
			t.Logf("upload, byte %d flipped: %v", at, err)
			if _, err := os.Lstat(filepath.Join(g.Root, "box", "up")); !os.IsNotExist(err) {
				t.Fatalf("upload with a flipped byte left %s in place (%v)", "up", err)
			}
			write(t, filepath.Join(g.Root, "box"), tree(t, local))
			dst := filepath.Join(t.TempDir(), "down")
			_, err = ferry.Download(ctx(t), sb, []string{"tree"}, dst, archive.Limits{})
			if err == nil {
				t.Fatalf("download with byte %d flipped succeeded", at)
			}
			t.Logf("download, byte %d flipped: %v", at, err)
			if ents, _ := os.ReadDir(filepath.Dir(dst)); len(ents) != 0 {
				t.Fatalf("download with a flipped byte left %v", ents)
			}
		})
	}
}

// TestAgentKilledMidTransfer kills the agent (SIGKILL) while it receives an
// upload and while it sends a download: errors, and nothing placed.
func TestAgentKilledMidTransfer(t *testing.T) {
	e := newEnv(t, transfer.ModeAgent)
	warmAgent(t)
	local := t.TempDir()
	noiseTree(t, local, 200, 11) // about 25 MiB
	for _, dir := range []string{"upload", "download"} {
		t.Run(dir, func(t *testing.T) {
			stop := make(chan struct{})
			killed := make(chan bool, 1)
			dst := filepath.Join(t.TempDir(), "down")
			// Data is flowing once a staging directory exists: the
			// agent's beside "up", or the host's beside dst.
			staging := func() bool {
				if dir == "upload" {
					ents, _ := os.ReadDir(e.root)
					for _, en := range ents {
						if strings.HasPrefix(en.Name(), ".") && en.Name() != ".gateway" {
							return true
						}
					}
					return false
				}
				ents, _ := os.ReadDir(filepath.Dir(dst))
				return len(ents) > 0
			}
			go func() { killed <- killAgentWhen(stop, staging) }()
			var err error
			if dir == "upload" {
				_, err = ferry.Upload(ctx(t), e.sb, []string{filepath.Join(local, "tree")}, "up")
			} else {
				write(t, e.root, tree(t, local))
				_, err = ferry.Download(ctx(t), e.sb, []string{"tree"}, dst, archive.Limits{})
			}
			close(stop)
			if !<-killed {
				t.Skip("the transfer ended before the agent could be killed")
			}
			if err == nil {
				t.Fatalf("%s succeeded with its agent killed", dir)
			}
			t.Logf("%s with the agent killed: %v", dir, err)
			var xe *agent.ExitedError
			if !errors.Is(err, agent.ErrExited) || !errors.As(err, &xe) || xe.Code == 0 {
				t.Fatalf("%s with the agent killed: %v, want an *agent.ExitedError with its exit status", dir, err)
			}
			if dir == "upload" {
				if _, err := os.Lstat(filepath.Join(e.root, "up")); !os.IsNotExist(err) {
					t.Fatalf("killed upload left up in place (%v)", err)
				}
				// Nor its staging directory: ferry removes it through a
				// new agent.
				ents, _ := os.ReadDir(e.root)
				for _, en := range ents {
					if strings.HasPrefix(en.Name(), ".ferry-staging-") {
						t.Fatalf("killed upload left %s", en.Name())
					}
				}
			}
			if ents, _ := os.ReadDir(filepath.Dir(dst)); len(ents) != 0 {
				t.Fatalf("killed download left %v", ents)
			}
		})
	}
}

// descendant reports whether process pid descends from ancestor, by the
// parent links in /proc (at most 64 of them).
func descendant(pid, ancestor int) bool {
	for range 64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if i < 0 || len(f) < 2 {
			return false
		}
		if pid, err = strconv.Atoi(f[1]); err != nil || pid <= 1 {
			return false
		}
		if pid == ancestor {
			return true
		}
	}
	return false
}

// killAgentWhen SIGKILLs every ferry agent serving that this test process
// started (through its in-process gateway) once ready() holds,
// polling until stop.
func killAgentWhen(stop <-chan struct{}, ready func() bool) bool {
	deadline := time.After(30 * time.Second)
	for {
		select {
		case <-stop:
			return false
		case <-deadline:
			return false
		case <-time.After(2 * time.Millisecond):
		}
		if !ready() {
			continue
		}
		killed := false
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err != nil || !strings.Contains(string(b), "/.ferry-") || !strings.Contains(string(b), "serve") {
				continue
			}
			pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			// Only an agent this test's own gateway started: never
			// another test binary's.
			if err == nil && descendant(pid, os.Getpid()) && syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed = true
			}
		}
		if killed {
			return true
		}
	}
}

// TestAutoFallsBackToPOSIX: where the agent cannot be installed (a temp
// dir that cannot be written), auto mode moves files in POSIX mode and
// says so, and agent mode fails saying why.
func TestAutoFallsBackToPOSIX(t *testing.T) {
	ws := t.TempDir()
	x, err := local.New(local.Config{Dir: ws, Env: append(os.Environ(), "TMPDIR=/dev/null/nowhere"), Shell: []string{"/bin/sh", "-c", `eval "$0"`}})
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	write(t, src, map[string]string{"a.txt": "A"})
	sb := sandboxFor(t, x, transfer.ModeAuto)
	st, err := ferry.Upload(ctx(t), sb, []string{filepath.Join(src, "a.txt")}, "a.txt")
	if err != nil || st.Mode != "posix" {
		t.Fatalf("auto: %+v %v, want a POSIX-mode copy", st, err)
	}
	sb.Mode = transfer.ModeAgent
	_, err = ferry.Upload(ctx(t), sb, []string{filepath.Join(src, "a.txt")}, "b.txt")
	if !errors.Is(err, agent.ErrUnavailable) || !strings.Contains(err.Error(), "/dev/null/nowhere") {
		t.Fatalf("agent mode: %v, want ErrUnavailable naming the temp dir", err)
	}
}

// TestSessionRestoreAutoFallsBack: a restore planned for the agent (auto
// mode, agents at hand), whose sandbox cannot run it, checks every chunk
// before POSIX mode's tar gets any, as a POSIX restore does: a corrupt
// chunk fails it with nothing written; an intact store restores.
func TestSessionRestoreAutoFallsBack(t *testing.T) {
	ws := t.TempDir()
	x, err := local.New(local.Config{Dir: ws, Env: append(os.Environ(), "TMPDIR=/dev/null/nowhere"), Shell: []string{"/bin/sh", "-c", `eval "$0"`}})
	if err != nil {
		t.Fatal(err)
	}
	sb := sandboxFor(t, x, transfer.ModeAuto)
	sb.Compress = frame.Zstd // the plan may start a chunk stream, then drops it
	write(t, filepath.Join(ws, "sess"), map[string]string{"a.jsonl": strings.Repeat("line\n", 1000), "b": "B"})
	st, dir := newStore(t, nil)
	if _, err := ferry.SaveSession(ctx(t), sb, st, session.SaveSpec{Dir: "sess", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	rr, err := ferry.RestoreSession(ctx(t), sb, st, session.RestoreSpec{Key: "k", Dir: "ok"})
	if err != nil || rr.Mode != "posix" || rr.Files != 2 {
		t.Fatalf("restore: %+v, %v; want 2 files in POSIX mode", rr, err)
	}
	chunks, err := filepath.Glob(filepath.Join(dir, "chunks", "*", "*"))
	if err != nil || len(chunks) == 0 {
		t.Fatalf("chunks on disk: %v, %v", chunks, err)
	}
	for _, c := range chunks {
		if err := os.WriteFile(c, []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err = ferry.RestoreSession(ctx(t), sb, st, session.RestoreSpec{Key: "k", Dir: "dst"})
	if !errors.Is(err, session.ErrChunkCorrupt) || !strings.Contains(err.Error(), "nothing written") {
		t.Fatalf("err = %v, want ErrChunkCorrupt from the check before anything is written", err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "dst")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed restore wrote the target: %v", err)
	}
}
