package local

import (
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// setGroup makes the child lead its own process group, so that one signal
// reaches everything it started, and has the kernel kill it if we die first.
func setGroup(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// intoCgroup has c start in cgroup, when there is one: cloned into it,
// so that nothing the child forks can start outside.
func intoCgroup(c *exec.Cmd, cgroup *os.File) {
	if cgroup != nil {
		c.SysProcAttr.UseCgroupFD = true
		c.SysProcAttr.CgroupFD = int(cgroup.Fd())
	}
}

func killGroup(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// growPipe asks for a pipe buffer of at least n bytes (Linux's default is
// 64 KiB); failure only costs speed.
func growPipe(f *os.File, n int) {
	if n <= 64<<10 {
		return
	}
	if sc, err := f.SyscallConn(); err == nil {
		_ = sc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, n) })
	}
}

// awaitExit blocks until the process pid has exited, without reaping it:
// the zombie keeps pid, and with it the process group's id, from being
// reused, so that killGroup after the exit can only reach the group we
// started, never a stranger's that got the number since. The caller
// reaps it (exec.Cmd.Wait) once it will signal the group no more.
func awaitExit(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return err
		}
	}
}
