package main

import (
	"bytes"
	"context"
	"encoding/gob"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay/grpcbuf"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// crashChildEnv, when set in the environment of this test binary, makes it
// ferry itself: its value is the JSON argv, run as main runs it, and the
// process exits with ferry's exit code before any test starts. That is how
// TestSessionCrashKill9 gets a ferry process to kill -9 that runs this
// tree's code and agent (a plain `go build` of ferry embeds whatever agent
// blobs the tree holds, which may lag the agent's source).
const crashChildEnv = "FERRY_TEST_CRASH_CHILD_ARGV"

// crashBundleEnv names the file holding the gob of the agent bundle the
// child installs.
const crashBundleEnv = "FERRY_TEST_CRASH_BUNDLE"

// crashHome is HOME as the test binary started, before isolate points it
// at a temp dir: the child's agent build must find Go's build cache.
var crashHome = os.Getenv("HOME")

func init() {
	argv := os.Getenv(crashChildEnv)
	if argv == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(argv), &args); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(3)
	}
	grpcbuf.Install()
	// The agent the parent built, so that the child spends no time on it.
	agentBundle = func() (agent.Bundle, error) {
		f, err := os.Open(os.Getenv(crashBundleEnv))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		var b agent.Bundle
		return b, gob.NewDecoder(f).Decode(&b)
	}
	os.Exit(runMain(args))
}

// startFerry starts this binary as `ferry args...` in the test's
// environment.
func startFerry(t *testing.T, bundle string, args ...string) *exec.Cmd {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	// A temp dir of the test's own: a child killed mid-save leaves its
	// download directory behind, which the test's cleanup then removes.
	cmd.Env = append(os.Environ(), crashChildEnv+"="+string(b), crashBundleEnv+"="+bundle, "HOME="+crashHome, "TMPDIR="+t.TempDir())
	var errb syncBuffer
	cmd.Stdout, cmd.Stderr = &errb, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// writeSessionTree writes a session directory at dir: base (the same
// bytes every round) and fresh incompressible bytes of round.
func writeSessionTree(t *testing.T, dir string, round, base, fresh int) {
	t.Helper()
	put := func(name string, r *rand.ChaCha8, n int) {
		b := make([]byte, n)
		r.Read(b)
		writeFile(t, filepath.Join(dir, name), b, 0o644)
	}
	br := rand.NewChaCha8([32]byte{7})
	for i := 0; i < 4; i++ {
		put(fmt.Sprintf("base/b%d", i), br, base/4)
	}
	fr := rand.NewChaCha8([32]byte{8, byte(round)})
	for i := 0; i < 4; i++ {
		put(fmt.Sprintf("new/r%d-%d", round, i), fr, fresh/4)
	}
	writeFile(t, filepath.Join(dir, "log", "t.jsonl"), []byte(fmt.Sprintf("{\"round\":%d}\n", round)), 0o644)
	if err := os.MkdirAll(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestSessionCrashKill9 is issue 5's kill -9 of ferry at random points of
// a save: `ferry --store DIR session save box:DIR KEY` through the
// embedded gateway, SIGKILLed after a random delay within the time an
// uninterrupted save takes. After each kill `ferry session verify` exits
// 0, the newest snapshot (the previous one, or the killed save's if it had
// committed) restores byte-identical, and a retry commits the next
// snapshot, which restores byte-identical.
func TestSessionCrashKill9(t *testing.T) {
	for _, mode := range []string{"posix", "agent"} {
		t.Run(mode, func(t *testing.T) { testSessionCrashKill9(t, mode) })
	}
}

func testSessionCrashKill9(t *testing.T, mode string) {
	const base, fresh = 1 << 20, 3 << 20
	const key = "crash-key"
	g := activeGateway(t)
	wantOK(t, runFerry(t, nil, "sandbox", "create", "box", "-q"))
	box := filepath.Join(g.Root, "box")
	storeDir := t.TempDir()
	b, err := local.NewDir(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := session.New(session.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	save := []string{"-q", "--store", storeDir, "--mode", mode, "session", "save"}
	// dirs[seq] is the sandbox directory snapshot seq was saved from.
	dirs := map[int64]string{}
	newest := func() int64 {
		t.Helper()
		list, err := st.List(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 0 {
			return 0
		}
		return list[len(list)-1].Seq
	}
	check := func(seq int64) {
		t.Helper()
		dst := filepath.Join(t.TempDir(), "restored")
		if _, err := st.Restore(context.Background(), key, dst, session.RestoreOptions{Seq: seq}); err != nil {
			t.Fatalf("restore snapshot %d: %v", seq, err)
		}
		transfertest.EqualTrees(t, filepath.Join(box, dirs[seq]), dst)
	}

	bundle := filepath.Join(t.TempDir(), "bundle.gob")
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(agenttest.Bundle(t)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, bundle, buf.Bytes(), 0o600)
	writeSessionTree(t, filepath.Join(box, "r0"), 0, base, fresh)
	wantOK(t, runFerry(t, nil, append(save, "box:r0", key)...))
	dirs[1] = "r0"
	// An uninterrupted save by a child process, timed: the kills fall
	// within that time.
	writeSessionTree(t, filepath.Join(box, "r1"), 1, base, fresh)
	start := time.Now()
	cmd := startFerry(t, bundle, append(save, "box:r1", key)...)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("uninterrupted save by a child: %v: %s", err, cmd.Stdout)
	}
	full := time.Since(start)
	dirs[2] = "r1"
	// What a child takes to start and end without touching the relay: the
	// kills fall after it, within the rest of a save's time.
	start = time.Now()
	if cmd := startFerry(t, bundle, "--store", storeDir, "session", "list"); cmd.Wait() != nil {
		t.Fatalf("session list by a child: %s", cmd.Stdout)
	}
	startup := min(time.Since(start), full/2)
	check(2)

	rng := rand.New(rand.NewPCG(11, 12))
	killed := 0
	for round := 2; round <= 5; round++ {
		dir := fmt.Sprintf("r%d", round)
		writeSessionTree(t, filepath.Join(box, dir), round, base, fresh)
		prev := newest()
		delay := startup + time.Duration(rng.Int64N(int64(full-startup)))
		cmd := startFerry(t, bundle, append(save, "box:"+dir, key)...)
		time.Sleep(delay)
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		switch {
		case ws.Signaled() && ws.Signal() == syscall.SIGKILL:
			killed++
		case err != nil:
			t.Fatalf("round %d: save ended before the kill with %v: %s", round, err, cmd.Stdout)
		}
		r := runFerry(t, nil, "--store", storeDir, "session", "verify")
		if r.code != 0 || !strings.Contains(r.stderr, "ok:") {
			t.Fatalf("round %d: verify after a kill after %v: exit %d, %s %s", round, delay, r.code, r.stdout, r.stderr)
		}
		now := newest()
		switch now {
		case prev:
		case prev + 1: // committed before the kill landed
			dirs[now] = dir
		default:
			t.Fatalf("round %d: newest snapshot %d after the kill, want %d or %d", round, now, prev, prev+1)
		}
		check(now)
		if round == 2 {
			// Once through the gateway too.
			back := fmt.Sprintf("back%d", round)
			wantOK(t, runFerry(t, nil, "-q", "--store", storeDir, "--mode", mode, "session", "restore", "--snapshot", fmt.Sprint(now), key, "box:"+back))
			transfertest.EqualTrees(t, filepath.Join(box, dirs[now]), filepath.Join(box, back))
		}
		wantOK(t, runFerry(t, nil, append(save, "box:"+dir, key)...))
		if got := newest(); got != now+1 {
			t.Fatalf("round %d: retry committed snapshot %d, want %d", round, got, now+1)
		}
		dirs[now+1] = dir
		check(now + 1)
	}
	t.Logf("%s: %d of 4 saves killed (an uninterrupted one takes %v, a child's start %v)", mode, killed, full, startup)
}
