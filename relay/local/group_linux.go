package local

import (
	"os/exec"
	"syscall"
)

// setGroup makes the child lead its own process group, so that one signal
// reaches everything it started, and has the kernel kill it if we die first.
func setGroup(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func killGroup(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}
