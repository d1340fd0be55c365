// Package sshexec runs relay commands over SSH: a [relay.Execer] built on
// golang.org/x/crypto/ssh that works over a TCP connection or over any
// net.Conn a caller dials (such as an OpenShell gateway's ForwardTcp relay).
//
// One connection is shared by concurrent Execs, each on its own session; it
// is opened on first use, kept alive with keepalive@openssh.com requests and
// opened again by the next Exec once it has died. The server runs each
// command with the user's login shell, which must be a POSIX shell (bash,
// dash, busybox ash, zsh).
//
// Stopping a remote command. The SSH "signal" request cannot be relied on:
// OpenSSH 9.2 refuses it for root logins ("session signalling requires
// privilege separation" in sshd's log: root sessions run without the
// privilege-separated child), other servers ignore it, and a server that
// signals only the process it started leaves that process's children
// running. So every command runs inside a small POSIX sh wrapper that
// records its shell's PID in a file with a random name under
// ${TMPDIR:-/tmp}; OpenSSH makes that shell a process-group leader (it
// calls setsid for the session). To stop the command, Exec runs a second,
// short command on the same connection that sends TERM to that process
// group, waits up to two seconds for it to go, sends KILL, and removes the
// file. The wrapper leaves stdin, stdout, stderr and the exit status as
// the command made them.
//
// A Command with TTY asks for a pty (pty-req, TERM=xterm-256color, its
// Size, 80x24 when unset) before the command and sends each Resize as a
// window-change; the wrapper is unchanged, its shell the terminal's
// session leader.
//
// Limitations: a process that leaves the group (setsid, a daemon) is not
// reached; on a server whose shell is not a group leader only that shell is
// killed; a dead connection cannot carry the second command, so a command
// cut off by a lost relay may run on.
package sshexec
