package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway"
)

// TestSSHExecLogged: a command run over the SSH relay is in the sandbox's
// log like an exec RPC: its command line, exit code and byte counts,
// never its stdin.
func TestSSHExecLogged(t *testing.T) {
	f := newRelay(t, gateway.Config{})
	c, _, _ := f.dial(t, "sandbox")
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	const secret = "s3cr3t-over-ssh"
	sess.Stdin = strings.NewReader(secret)
	err = sess.Run("cat >/dev/null; echo four; exit 5")
	sess.Close()
	if err == nil || !strings.Contains(err.Error(), "5") {
		t.Fatalf("run: %v, want exit 5", err)
	}
	// The record is written once the session's process is done, which
	// may come just after the client saw the exit.
	var got map[string]string
	for range 50 {
		resp, err := f.c.GetSandboxLogs(context.Background(), &openshellv1.GetSandboxLogsRequest{SandboxId: f.id})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range resp.GetLogs() {
			if strings.Contains(l.GetMessage()+l.String(), secret) {
				t.Fatalf("log carries stdin: %v", l)
			}
			if l.GetMessage() == "exec" && strings.Contains(l.GetFields()["argv"], "exit 5") {
				got = l.GetFields()
			}
		}
		if got != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got == nil {
		t.Fatal("no exec record for the SSH command")
	}
	for k, v := range map[string]string{"argv": "'cat >/dev/null; echo four; exit 5'", "exit_code": "5", "end": "exit", "stdin_bytes": "15", "stdout_bytes": "5"} {
		if got[k] != v {
			t.Errorf("%s=%q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}
