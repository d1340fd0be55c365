package transfertest

import (
	"os/exec"
	"testing"
)

// DeadPID is the PID of a process the test ran and reaped: a PID that
// names no process, for code that tells live owners from gone ones.
func DeadPID(t testing.TB) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}
