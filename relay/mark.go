package relay

import (
	"crypto/rand"
	"encoding/hex"
)

// MarkVar is the environment variable a client sets on a command whose
// processes it may have to end itself, because the server will not: an
// OpenShell gateway lets an exec whose client went away, or whose timeout
// passed, run on, and its processes share the supervisor's process group,
// so that no group kill reaches them either. Every process the command
// starts inherits the variable unless it clears its environment; StopScript
// ends them by it. A process meant to outlive the command (the agent's
// detached supervisor) drops it.
const MarkVar = "FERRY_EXEC_ID"

// NewMark returns a fresh value for MarkVar: 128 random bits, so that no
// other command's processes carry it and nobody can guess it beforehand.
func NewMark() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// StopScript ends every process of the user running it whose environment
// carries MarkVar=$1: TERM, up to two seconds (20 x 0.1 s) for them to go,
// then KILL. It is run as `sh -c StopScript sh MARK`, so that the mark is
// in its arguments, never in its own environment. It uses grep and kill,
// and reads /proc, which every Linux sandbox has; a process whose
// environment it cannot read (another user's, a zombie's) is not matched.
// It always exits 0: there is nothing a caller would do about a process
// that would not die.
const StopScript = `_ferry_m="` + MarkVar + `=$1"; ` + StopMarked + `; exit 0`

// StopMarked is StopScript's body, for a script of another transport
// (sshexec's stop) that has set _ferry_m to "FERRY_EXEC_ID=<mark>".
const StopMarked = `_ferry_kill() { _ferry_n=0; for _ferry_f in $(grep -l -F -e "$_ferry_m" /proc/[0-9]*/environ 2>/dev/null); do ` +
	`_ferry_p=${_ferry_f#/proc/}; _ferry_p=${_ferry_p%/environ}; [ "$_ferry_p" = "$$" ] && continue; ` +
	`kill -"$1" "$_ferry_p" 2>/dev/null && _ferry_n=$((_ferry_n+1)); done; [ "$_ferry_n" -gt 0 ]; }; ` +
	`if _ferry_kill TERM; then _ferry_i=0; while [ $_ferry_i -lt 20 ] && _ferry_kill 0; do sleep 0.1 2>/dev/null || sleep 1; _ferry_i=$((_ferry_i+1)); done; ` +
	`_ferry_kill KILL; fi`
