package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// growPipes raises the buffer of any of fs that is a pipe to 1 MiB (from
// Linux's 64 KiB): bulk stdin and stdout then move in a quarter of the reads
// and writes, and the exec stream carries full-size messages. Failure only
// costs speed.
func growPipes(fs ...*os.File) {
	for _, f := range fs {
		fi, err := f.Stat()
		if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			continue
		}
		if sc, err := f.SyscallConn(); err == nil {
			_ = sc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20) })
		}
	}
}
