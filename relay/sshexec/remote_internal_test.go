package sshexec

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/relaytest"
	"github.com/ferry-dev/ferry/relay/sshexec/sshdtest"
)

// TestStopBeforeStart covers the race the tombstone exists for: a stop that
// runs before the wrapper must keep the command from ever starting, and the
// cleanup must leave nothing behind.
func TestStopBeforeStart(t *testing.T) {
	srv := sshdtest.Start(t)
	c, err := ssh.Dial("tcp", srv.Addr, &ssh.ClientConfig{
		User:            srv.User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(srv.Signer)},
		HostKeyCallback: ssh.FixedHostKey(srv.HostKey),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	runScript := func(script string) (string, int) {
		t.Helper()
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		out, err := s.CombinedOutput(script)
		var ee *ssh.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("%s: %v", script, err)
		}
		if ee != nil {
			return string(out), ee.ExitStatus()
		}
		return string(out), 0
	}
	// sshd gives the session a fresh environment, without TMPDIR.
	id := newID()
	file := filepath.Join("/tmp", ".ferry-exec-"+id)
	if out, code := runScript(stopScript(id)); code != stopTombstone || out != "" {
		t.Fatalf("stop before start: code=%d output=%q, want %d and silence", code, out, stopTombstone)
	}
	if out, code := runScript(wrap(id, commandLine("", nil, []string{"echo", "ran"}))); strings.Contains(out, "ran") || code == 0 {
		t.Fatalf("the wrapper ran its command after a stop: code=%d output=%q", code, out)
	}
	runScript(cleanupScript(id))
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s left behind: %v", file, err)
	}

	// A normal run leaves no pid file either, and its status is its own.
	id = newID()
	if out, code := runScript(wrap(id, commandLine("/", nil, []string{"sh", "-c", "printf x; exit 7"}))); out != "x" || code != 7 {
		t.Fatalf("wrapped run: code=%d output=%q, want 7 and %q", code, out, "x")
	}
	if _, err := os.Stat(filepath.Join("/tmp", ".ferry-exec-"+id)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pid file left after a normal exit: %v", err)
	}
}

// TestStopWithoutGroup: where the wrapper leads no process group of its
// own (OpenShell's supervisor starts a session's process in its own
// group, not a new one), the stop finds what the command started by the
// mark the wrapper exported, and ends it.
func TestStopWithoutGroup(t *testing.T) {
	tmp := t.TempDir()
	id := newID()
	mark := relay.MarkVar + "=" + id
	run := func(script string) *exec.Cmd {
		c := exec.Command("sh", "-c", script)
		c.Env = append(os.Environ(), "TMPDIR="+tmp)
		return c
	}
	w := run(wrap(id, commandLine("", nil, []string{"sh", "-c", "sleep 300 & sleep 300 & echo ready; wait"})))
	out, err := w.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		w.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		w.Process.Kill()
		<-done
	})
	line := make([]byte, 6)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("wrapper said %q, %v", line, err)
	}
	if pg, err := syscall.Getpgid(w.Process.Pid); err != nil || pg == w.Process.Pid {
		t.Fatalf("the wrapper leads group %d (%v): the test needs one that does not", pg, err)
	}
	// The command's sh and its two sleeps; a child still in its exec has
	// no readable environment yet, so wait a little for all three.
	for deadline := time.Now().Add(5 * time.Second); len(relaytest.WithEnv(mark)) < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d processes carry the mark, want the command's sh and its two sleeps", len(relaytest.WithEnv(mark)))
		}
	}
	if b, err := run(stopScript(id)).CombinedOutput(); err != nil {
		t.Fatalf("stop: %v: %s", err, b)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the wrapper outlived the stop")
	}
	if left := relaytest.WithEnv(mark); len(left) > 0 {
		t.Fatalf("processes %v still carry the mark after the stop", left)
	}
}
