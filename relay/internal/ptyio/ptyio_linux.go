// Package ptyio opens pseudo-terminals whose master side can be closed
// under a blocked reader, for the local runner and the embedded gateway.
package ptyio

import (
	"fmt"
	"os"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// Open opens a pseudo-terminal whose master stays in Go's poller.
// pty.Open reaches the master through Fd(), which leaves it blocking, and
// Close cannot interrupt a blocking Read: a copier could then outlive its
// exec for as long as some stray process holds the slave. A non-blocking
// duplicate can be closed under its reader.
func Open() (master, slave *os.File, err error) {
	m, s, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	m.Close()
	if err == nil {
		if err = unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		s.Close()
		return nil, nil, fmt.Errorf("duplicate pty master: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), s, nil
}

// SetSize sets the terminal's size through the poller's own descriptor
// (pty.Setsize goes through Fd(), which would make the master blocking).
// A zero dimension is one cell, as upstream's sandbox makes it.
func SetSize(master *os.File, cols, rows uint16) error {
	sc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	w := &unix.Winsize{Row: max(rows, 1), Col: max(cols, 1)}
	var ierr error
	if err := sc.Control(func(fd uintptr) { ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, w) }); err != nil {
		return err
	}
	return ierr
}

// SysProcAttr starts a process on the slave (its fd 0) as the leader of
// a session of its own, with the terminal as its controlling one, and has
// the kernel kill it if we die first. Leading a session it leads its
// process group: one kill of -pid reaches what it started.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
}
