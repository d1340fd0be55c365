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

// waitExited blocks until child pid has exited, without reaping it
// (WNOWAIT): the reap is exec.Cmd.Wait's, under the lock that exitCode
// reads its state under.
func waitExited(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}
