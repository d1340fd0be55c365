// Package agent is the host's side of ferry's agent mode: a small static
// binary that the host streams into the sandbox over the exec channel and
// then talks to over that same channel, so that hashing, compression and
// the following of growing files happen next to the data (DESIGN.md, "The
// agent").
//
// The package is one of four, split by side. This one is the host's: Dial,
// the install, and the Client with its operations, in this package's own
// types (no ferry.agent.v1 type appears in its API). The sandbox's side,
// the gRPC service cmd/ferry-agent serves, is package agent/server; the
// detached-run supervisor, a process of its own with its records on disk,
// is package agent/supervisor; what both ends agree on (the hello, the
// codec, the framing of a tree, the reasons a failure travels under) is
// package agent/internal/wire, re-exported here where callers need it
// ([Hello], [ReadHello], [NoMagicError], [VersionError], [ErrInvalidPath],
// [ChunkError]). The client never imports the server, nor the server the
// client, so neither side carries the other's code.
//
// On the wire, each direction starts with a [Hello]: Magic, the protocol
// version and the SHA-256 of the agent binary, in HelloLen bytes.
// [ReadHello] skips what precedes the magic (a login shell's banner, at most
// a bound of it), reports output without a hello as a [*NoMagicError] that
// shows what came instead, a peer of another version as a [*VersionError],
// and never reads past the hello. gRPC (service ferry.agent.v1, proto in
// proto/ferry/agent/v1) follows on the same streams.
//
// The operations: Probe, Stat, Put (a framed stream of entries out, in
// archive.FormatEntries, extracted by the agent through os.Root into
// staging and placed only after the trailer's entry count, byte count and
// every file's digest (archive.FileDigest) match), Get (the mirror, a tar
// checked the same way here),
// Follow (growing files from offsets), Remove, and for session saves Scan
// (content-defined chunks and their digests, computed next to the data;
// the host's known files streamed in walk order beside the walk),
// ReadChunks (only the chunks the store lacks, each re-checked here) and,
// for restores, Restore (stored chunks out, each checked by the agent
// against its id before a byte of it is written). Spawn, RunStatus and
// Signal run commands detached from the exec that started them, under a
// supervisor process whose state lives in the sandbox (see
// [Client.Spawn]). Every answer of the agent is a claim: the client checks
// what it can, and converts nothing it cannot represent into something it
// can (a kind or chunk id outside the protocol is [ErrBadAnswer]).
//
// [Dial]: one exec runs the cached agent for the sandbox's architecture,
// or describes the sandbox when there is none; ferry then streams the
// build in (zstd, gzip or raw, whatever the sandbox can decode; written to
// a temporary name and renamed, so concurrent installs are safe) and runs
// it. A cached copy that is not a build the host carries is replaced.
// Where the agent cannot run, Dial fails with ErrUnavailable, on which auto
// mode falls back to POSIX mode (package transfer/posix).
package agent
