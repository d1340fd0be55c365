package sshexec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

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
