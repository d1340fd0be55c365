package gateway

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// sessionAttr starts an SSH session's process as sshd does, in a session
// of its own (so it leads its process group), and has the kernel kill it
// if the gateway dies first.
func sessionAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup kills an SSH session's whole process group. Callers kill only
// before the leader is reaped: a zombie still holds its PID, so the group
// number cannot have passed to someone else's process group.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }

// waitExited blocks until child pid has exited, without reaping it
// (WNOWAIT), so that killGroup stays safe until exec.Cmd.Wait reaps it.
func waitExited(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}
