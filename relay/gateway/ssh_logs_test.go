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
// never its stdin, and its OCSF launch and exit of one pid.
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
	var launch, term string
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
			if l.GetLevel() == "OCSF" && strings.HasPrefix(l.GetMessage(), "PROC:LAUNCH") && strings.Contains(l.GetMessage(), "exit 5") {
				launch = l.GetMessage()
			}
			if l.GetLevel() == "OCSF" && strings.HasPrefix(l.GetMessage(), "PROC:TERMINATE") && strings.HasSuffix(l.GetMessage(), "[exit:5]") {
				term = l.GetMessage()
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
	// PROC:LAUNCH [INFO] sh(PID) [cmd:sh -c '...'] and
	// PROC:TERMINATE [INFO] sh(PID) [exit:5]: one process.
	proc := func(m string) string {
		if i := strings.Index(m, "] "); i >= 0 {
			m = m[i+2:]
		}
		if i := strings.Index(m, ") ["); i >= 0 {
			return m[:i+1]
		}
		return ""
	}
	if !strings.HasPrefix(launch, "PROC:LAUNCH [INFO] ") || term == "" || proc(launch) == "" || proc(launch) != proc(term) {
		t.Fatalf("OCSF events of the SSH command: launch %q, terminate %q; want one process's", launch, term)
	}
	for k, v := range map[string]string{"argv": "'cat >/dev/null; echo four; exit 5'", "exit_code": "5", "end": "exit", "stdin_bytes": "15", "stdout_bytes": "5"} {
		if got[k] != v {
			t.Errorf("%s=%q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}
