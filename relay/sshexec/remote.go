package sshexec

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/ferry-dev/ferry/relay"
)

// The remote side of stopping a command (see the package doc). Both scripts
// are POSIX sh, run by the login shell sshd starts, and use only shell
// builtins besides rm and sleep. Shell variables start with _ferry_ so that
// they cannot shadow a variable the command inherits.

// pidFile is the shell expression naming the file of one command's process
// group. The 128-bit random id makes the name unguessable to other users.
func pidFile(id string) string {
	return `"${TMPDIR:-/tmp}/.ferry-exec-` + id + `"`
}

// wrap returns the script that runs line, from commandLine, under the
// wrapper.
//
// The wrapper moves its own stderr to /dev/null, keeping the caller's as fd
// 3 for line: a shell reports a foreground child's death by signal
// ("Killed") on its stderr, which the caller must not see. It creates the
// pid file exclusively (noclobber) and writes its own PID, which is its
// process group under OpenSSH. If the file already exists, a stop ran
// before the wrapper did, so it exits without running line. If it cannot
// be created at all (no writable temp dir), line runs unprotected. It exits
// with line's status, which the shell reports as 128+n for a death by
// signal n.
//
// The wrapper also exports relay.MarkVar=id to line, for the stop to find
// what line started where its PID leads no process group: OpenShell's
// supervisor, unlike OpenSSH's sshd, does not start a session's process
// in a group of its own.
func wrap(id, line string) string {
	return `exec 3>&2 2>/dev/null; ` + relay.MarkVar + `=` + id + `; export ` + relay.MarkVar + `; _ferry_f=` + pidFile(id) + `; if { set -C; echo $$ >"$_ferry_f"; }; then set +C; else set +C; if [ -e "$_ferry_f" ]; then rm -f "$_ferry_f"; exit 137; fi; fi; ` + line + "\n" +
		`_ferry_s=$?; rm -f "$_ferry_f"; exit $_ferry_s`
}

// commandLine is relay.ShellCommand's command with stderr, which the
// wrapper keeps as fd 3, given back to the cd builtin and to the program.
// The redirections on a simple command apply in the child for bash, but in
// the parent for dash and busybox, which would then print "Killed" to the
// caller's stderr; in a subshell every one of these shells execs the last
// command in place, so no shell is left to print it.
func commandLine(workdir string, env map[string]string, argv []string) string {
	var b strings.Builder
	b.WriteString("( ")
	if workdir != "" {
		b.WriteString("cd " + relay.Quote(workdir) + " 2>&3 && ")
	}
	b.WriteString(relay.ShellCommand("", env, argv))
	b.WriteString(" 2>&3 3>&- )")
	return b.String()
}

// Exit statuses of the stop script.
const (
	stopDone      = 0 // the group was signalled, or is gone
	stopTombstone = 3 // no pid file: one was left so the wrapper will not start
)

// stopScript sends TERM to the command's process group, waits up to two
// seconds (20 x 0.1s) for it to go, then sends KILL, and removes the pid
// file. When the file does not exist yet it creates an empty one, a
// tombstone that stops the wrapper from starting the command. An empty file
// is the wrapper caught between creating and writing it: read again.
//
// Where /proc is readable the wait looks for live members of the group
// there, since kill -0 also counts zombies, which an init that reaps
// lazily (common in containers) keeps around for a while.
func stopScript(id string) string {
	return `_ferry_f=` + pidFile(id) + `; if (set -C; : >"$_ferry_f") 2>/dev/null; then exit 3; fi; ` +
		`_ferry_i=0; _ferry_g=; while [ $_ferry_i -lt 20 ]; do read _ferry_g <"$_ferry_f"; case $_ferry_g in ''|*[!0-9]*) sleep 0.1 2>/dev/null || sleep 1; _ferry_i=$((_ferry_i+1));; *) break;; esac; done; ` +
		`rm -f "$_ferry_f"; case $_ferry_g in ''|*[!0-9]*) exit 0;; esac; ` +
		`_ferry_live() { if [ -r /proc/self/stat ]; then for _ferry_p in /proc/[0-9]*/stat; do read -r _ferry_l 2>/dev/null <"$_ferry_p" || continue; set -- ${_ferry_l##*) }; [ "$3" = "$_ferry_g" ] && [ "$1" != Z ] && [ "$1" != X ] && return 0; done; return 1; fi; kill -0 -$_ferry_g 2>/dev/null; }; ` +
		// A PID that is not a group leader has no group of its own, so
		// "kill -TERM -PID" fails rather than hitting some other group:
		// what the wrapper started is then found by its mark.
		`kill -TERM -$_ferry_g 2>/dev/null || { _ferry_m="` + relay.MarkVar + `=` + id + `"; ` + relay.StopMarked + `; kill -KILL $_ferry_g 2>/dev/null; exit 0; }; ` +
		`_ferry_i=0; while [ $_ferry_i -lt 20 ] && _ferry_live; do sleep 0.1 2>/dev/null || sleep 1; _ferry_i=$((_ferry_i+1)); done; ` +
		`kill -KILL -$_ferry_g 2>/dev/null; exit 0`
}

// cleanupScript removes a tombstone once the command's session has ended,
// that is once the wrapper has either seen it or can no longer start.
func cleanupScript(id string) string {
	return `rm -f ` + pidFile(id)
}

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// signals numbers the signal names of RFC 4254 section 6.10 as Linux does.
var signals = map[string]int{
	"ABRT": 6, "ALRM": 14, "FPE": 8, "HUP": 1, "ILL": 4, "INT": 2, "KILL": 9,
	"PIPE": 13, "QUIT": 3, "SEGV": 11, "TERM": 15, "USR1": 10, "USR2": 12,
}

// exitCode is the shell's view of how the remote process ended: its status,
// or 128+n for a death by signal n, or 1 for a signal without a known
// number. ok is false when err is not an exit report at all.
func exitCode(err error) (code int, ok bool) {
	if err == nil {
		return 0, true
	}
	var ee *ssh.ExitError
	if !errors.As(err, &ee) {
		return 0, false
	}
	if sig := ee.Signal(); sig != "" {
		if n, known := signals[sig]; known {
			return 128 + n, true
		}
		return 1, true
	}
	return ee.ExitStatus(), true
}
