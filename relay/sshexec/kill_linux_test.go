package sshexec_test

import "syscall"

func killPID(pid int) { syscall.Kill(pid, syscall.SIGKILL) }
