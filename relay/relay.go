package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Execer runs one command in a sandbox.
//
// Exec starts cmd.Argv in the sandbox named cmd.Sandbox, streams cmd.Stdin
// to the process as the process consumes it, copies the process's stdout and
// stderr to cmd.Stdout and cmd.Stderr, and returns the process's exit code
// once it has exited and its output has been delivered.
//
// The contract, which relay/relaytest checks for every implementation:
//   - err == nil means the exit code is the remote process's own; any failure
//     of the channel (a cut relay, a stream that ends without an exit status)
//     is an error, never a zero exit code.
//   - Stdin is read only as fast as it can be forwarded, never read ahead to
//     EOF before the call. EOF on Stdin becomes EOF on the process's stdin
//     (on a terminal it does not: see Command.TTY). A
//     nil Stdin is an empty one. Exec does not wait for Stdin to reach EOF:
//     once the process has exited, Exec returns, and a Read still blocked on
//     Stdin is left to return on its own; whatever it returns is discarded.
//     Exec never closes Stdin.
//   - Stdout and Stderr are written from at most one goroutine each, never
//     after Exec has returned. Nil means discard.
//   - Cancelling ctx stops the remote process (no orphan is left where the
//     implementation can reach it) and Exec returns ctx's error.
//   - Exec is safe for concurrent use.
type Execer interface {
	Exec(ctx context.Context, cmd *Command) (exitCode int, err error)
}

// Command is one process to run in a sandbox.
type Command struct {
	// Sandbox names the sandbox. Implementations that reach exactly one
	// machine (SSH, local) treat it as a label.
	Sandbox string
	// Argv is the program and its arguments, passed to the remote side as
	// separate words (quoted into a shell string where the transport needs
	// one). It must not be empty.
	Argv []string
	// Workdir is the directory to start in; empty is the sandbox's workspace
	// root, and a relative path is relative to it.
	Workdir string
	// Env adds variables to the process's environment. Never put secrets
	// here: gateways log it.
	Env map[string]string
	// Timeout, when positive, bounds the process's run time; past it the
	// process is killed and the exit code is 124.
	Timeout time.Duration

	// TTY runs the process on a pseudo-terminal of its own, as `ssh -t`
	// and OpenShell's tty exec do: its stdout and stderr are both the
	// terminal, so all its output, echo included, reaches Stdout with the
	// terminal's line endings, and Stderr gets nothing. Stdin is typed at
	// the terminal; its EOF ends the input but is no EOF to the process
	// (upstream's gateway delivers none): send ^D (0x04) for that.
	// Transports that cannot allocate one fail with ErrNoTTY.
	TTY bool
	// EndsAtEOF says the command ends by itself once its stdin reaches
	// EOF, which every transport delivers when an exec ends early (a
	// cancel, a lost relay): a transport that would otherwise stop what
	// the command left running (relay/openshell, see MarkVar) need not.
	// ferry's agent sets it: its exec is cancelled at the end of every
	// connection, and a stop would cost an exec each time.
	EndsAtEOF bool
	// Size is the terminal's size when TTY is set; zero is the transport's
	// default (80x24 on OpenShell's streaming exec).
	Size WindowSize
	// Resize, when TTY is set, carries the terminal's later sizes, read
	// until the process exits; the caller need not close it.
	Resize <-chan WindowSize

	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// WindowSize is a terminal's size in character cells.
type WindowSize struct {
	Cols, Rows uint16
}

// ExitTimeout is the exit code reported when Command.Timeout expires, as
// timeout(1) and the OpenShell gateway do.
const ExitTimeout = 124

// Limits enforced by OpenShell gateways; ferry checks them before any call
// so that a bad argument fails the same way on every transport.
const (
	MaxMessageSize = 1 << 20 // one gRPC message
	MaxArgs        = 1024
	MaxArgLen      = 32 << 10
	MaxEnvValueLen = 32 << 10
	MaxWorkdirLen  = 4096
	MaxCommandLen  = 256 << 10 // the assembled shell string
)

var (
	// ErrRelayLost means the channel to the sandbox broke before the
	// process's exit status arrived. The process may or may not have run to
	// completion; callers may retry a step that is safe to repeat.
	ErrRelayLost = errors.New("relay: relay lost")
	// ErrNotFound means the sandbox does not exist.
	ErrNotFound = errors.New("relay: sandbox not found")
	// ErrNotReady means the sandbox exists but cannot run commands yet.
	ErrNotReady = errors.New("relay: sandbox not ready")
	// ErrInvalid means the command breaks one of the limits above.
	ErrInvalid = errors.New("relay: invalid command")
	// ErrBusy means the gateway refused a connection over one of its
	// limits on concurrent ones (3 per SSH session token, 20 per
	// sandbox): the request was valid, and may succeed once others end.
	ErrBusy = errors.New("relay: gateway connection limit reached")
	// ErrStdinTooLarge means a one-shot exec was asked to carry more stdin
	// than fits in one message.
	ErrStdinTooLarge = errors.New("relay: stdin too large for one-shot exec")
	// ErrNoTTY means the transport, or the server behind it, cannot run
	// a command on a terminal.
	ErrNoTTY = errors.New("relay: transport has no terminal support")
)

// allowedOpenShellKeys are the OPENSHELL_ environment keys an exec may set,
// upstream's EXEC_ALLOWED_OPENSHELL_KEYS: the Python SDK's exec_python
// sends its pickled callable in OPENSHELL_PYFUNC_B64.
var allowedOpenShellKeys = []string{"OPENSHELL_PYFUNC_B64"}

var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks cmd against the gateway's limits. The error wraps
// ErrInvalid and names the argument or variable at fault.
func (cmd *Command) Validate() error {
	if len(cmd.Argv) == 0 {
		return fmt.Errorf("%w: empty argv", ErrInvalid)
	}
	if len(cmd.Argv) > MaxArgs {
		return fmt.Errorf("%w: %d arguments, at most %d", ErrInvalid, len(cmd.Argv), MaxArgs)
	}
	for i, a := range cmd.Argv {
		if len(a) > MaxArgLen {
			return fmt.Errorf("%w: argument %d is %d bytes, at most %d", ErrInvalid, i, len(a), MaxArgLen)
		}
		// Upstream refuses only NUL here: a newline is valid in an
		// argument, an inline script's (sh -c $'a\nb').
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("%w: argument %d %q contains NUL", ErrInvalid, i, clip(a))
		}
	}
	for k, v := range cmd.Env {
		if !envKeyRE.MatchString(k) {
			return fmt.Errorf("%w: environment key %q", ErrInvalid, clip(k))
		}
		if len(v) > MaxEnvValueLen {
			return fmt.Errorf("%w: environment value of %s is %d bytes, at most %d", ErrInvalid, k, len(v), MaxEnvValueLen)
		}
		if strings.ContainsAny(v, "\x00\n\r") {
			return fmt.Errorf("%w: environment value of %s contains NUL, newline or carriage return", ErrInvalid, k)
		}
		if strings.HasPrefix(k, "OPENSHELL_") && !slices.Contains(allowedOpenShellKeys, k) {
			// Reserved by the gateway for its own use.
			return fmt.Errorf("%w: environment key %s: OPENSHELL_ keys are reserved", ErrInvalid, k)
		}
	}
	if len(cmd.Workdir) > MaxWorkdirLen {
		return fmt.Errorf("%w: workdir is %d bytes, at most %d", ErrInvalid, len(cmd.Workdir), MaxWorkdirLen)
	}
	if strings.ContainsAny(cmd.Workdir, "\x00\n\r") {
		return fmt.Errorf("%w: workdir %q contains NUL, newline or carriage return", ErrInvalid, clip(cmd.Workdir))
	}
	if cmd.Timeout < 0 {
		return fmt.Errorf("%w: negative timeout", ErrInvalid)
	}
	// Checked last: the string is only worth building once every part is
	// within its own limit.
	if n := len(ShellCommand(cmd.Workdir, cmd.Env, cmd.Argv)); n > MaxCommandLen {
		return fmt.Errorf("%w: assembled command is %d bytes, exceeds %d byte limit", ErrInvalid, n, MaxCommandLen)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
