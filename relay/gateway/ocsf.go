package gateway

import (
	"strconv"
	"strings"
	"unicode"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
)

// OCSF process-activity events, as upstream's supervisor reports the
// processes it runs (crates/openshell-supervisor-process/src/run.rs) and
// carries them (log_push.rs LogPushLayer): a SandboxLogLine with level
// "OCSF", target "ocsf", source "sandbox", no fields, and the event's
// shorthand (openshell-ocsf format_shorthand, Process Activity arm) as its
// message:
//
//	PROC:LAUNCH [INFO] sh(4242) [cmd:sh -c 'echo hi']
//	PROC:TERMINATE [INFO] sh(4242) [exit:0]
//
// The secret rule of logs.go holds: the command line is the request's
// argv, never its environment values, stdin or output.
const (
	ocsfLevel  = "OCSF"
	ocsfTarget = "ocsf"
	ocsfSource = "sandbox"
)

// ocsfProc names a process as the shorthand does: name(pid).
func ocsfProc(argv []string, pid int) string {
	name := "unknown"
	if len(argv) > 0 && argv[0] != "" {
		name = argv[0]
	}
	return ocsfText(clipField(name)) + "(" + strconv.Itoa(pid) + ")"
}

// ocsfText keeps a value on one line: upstream's cmd_line is not escaped,
// but a record here is one line whatever the request carried.
func ocsfText(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// logLaunch records a process of sandbox id started with pid.
func (s *Server) logLaunch(id string, cmd *relay.Command, pid int) {
	words := make([]string, len(cmd.Argv))
	for i, a := range cmd.Argv {
		words[i] = relay.Quote(a)
	}
	msg := "PROC:LAUNCH [INFO] " + ocsfProc(cmd.Argv, pid) + " [cmd:" + ocsfText(clipField(strings.Join(words, " "))) + "]"
	s.logs.addLine(ocsfLine(id, msg))
}

// logTerminate records how that process ended: an exit with its code
// ([CRIT] for a timeout, which upstream reports as critical), or, killed
// by the gateway (a cut relay, a cancelled client, a deleted sandbox),
// [MED] without a code.
func (s *Server) logTerminate(id string, cmd *relay.Command, pid, code int, end string) {
	msg := "PROC:TERMINATE "
	switch end {
	case "exit":
		msg += "[INFO] " + ocsfProc(cmd.Argv, pid) + " [exit:" + strconv.Itoa(code) + "]"
	case "timeout":
		msg += "[CRIT] " + ocsfProc(cmd.Argv, pid) + " [exit:" + strconv.Itoa(code) + "]"
	default:
		msg += "[MED] " + ocsfProc(cmd.Argv, pid)
	}
	s.logs.addLine(ocsfLine(id, msg))
}

func ocsfLine(id, msg string) *openshellv1.SandboxLogLine {
	return &openshellv1.SandboxLogLine{SandboxId: id, Level: ocsfLevel, Target: ocsfTarget, Source: ocsfSource, Message: msg}
}
