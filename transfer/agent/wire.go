package agent

import (
	"io"

	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// What the host's callers see of the wire both ends share (package
// agent/internal/wire): the hello and its errors, the sentinels a
// sandbox-side failure arrives as, and the exit codes a supervised
// command reports.

// Hello is what each end sends first: the protocol version and the SHA-256
// of the agent binary.
type Hello = wire.Hello

// Protocol constants: see package agent/internal/wire.
const (
	Magic           = wire.Magic
	ProtocolVersion = wire.ProtocolVersion
	HelloLen        = wire.HelloLen
	DefaultMaxSkip  = wire.DefaultMaxSkip
	// ChunkSize is the size of one data message.
	ChunkSize = wire.ChunkSize
)

// NoMagicError is output that carried no hello (ReadHello); it matches
// ErrNoMagic.
type NoMagicError = wire.NoMagicError

// VersionError is a peer of another protocol version.
type VersionError = wire.VersionError

// Sentinels ReadHello's errors match: see package agent/internal/wire.
var (
	// ErrNoMagic matches a *NoMagicError.
	ErrNoMagic = wire.ErrNoMagic
	// ErrHelloTruncated is a stream that ended inside the hello.
	ErrHelloTruncated = wire.ErrHelloTruncated
)

// ReadHello reads a hello from r, skipping up to maxSkip bytes before it.
func ReadHello(r io.Reader, maxSkip int) (Hello, error) { return wire.ReadHello(r, maxSkip) }

// WriteHello writes h to w.
func WriteHello(w io.Writer, h Hello) error { return wire.WriteHello(w, h) }

// ErrInvalidPath means a path or name was refused: empty, holding NUL,
// newline or carriage return, or (a Get name) absolute or leading out of
// its directory. The agent refuses the same, with the same sentinel.
var ErrInvalidPath = wire.ErrInvalidPath

// ErrChunk matches a Restore whose chunk does not decode to the content
// its id names: a damaged store, or a damaged relay. *ChunkError says
// which.
var ErrChunk = wire.ErrChunk

// ChunkError is a Restore chunk the agent refused: Index counts the
// chunks the call sent, from 0.
type ChunkError = wire.ChunkError

// Exit codes a supervised command reports (RunStatus.ExitCode).
const (
	// ExitTimeout is a command ended by its timeout, as timeout(1) says.
	ExitTimeout = wire.ExitTimeout
	// ExitCannotRun is a command that could not be started.
	ExitCannotRun = wire.ExitCannotRun
)
