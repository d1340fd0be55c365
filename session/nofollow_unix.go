//go:build unix

package session

import "syscall"

// oNoFollow keeps a scan from opening what a file was swapped for.
const oNoFollow = syscall.O_NOFOLLOW
