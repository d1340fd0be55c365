// Package agent is ferry's agent mode: a small static binary that the host
// streams into the sandbox over the exec channel and then talks to over that
// same channel, so that hashing, compression and the following of growing
// files happen next to the data (DESIGN.md, "The agent").
//
// On the wire, each direction starts with a [Hello]: Magic, the protocol
// version and the SHA-256 of the agent binary, in HelloLen bytes.
// [ReadHello] skips what precedes the magic (a login shell's banner, at most
// a bound of it), reports output without a hello as a [*NoMagicError] that
// shows what came instead, a peer of another version as a [*VersionError],
// and never reads past the hello. gRPC (service ferry.agent.v1, proto in
// proto/ferry/agent/v1) follows on the same streams.
//
// The agent's side is [Serve] (cmd/ferry-agent is its main): Probe, Stat,
// Put (a framed tar stream in, extracted through os.Root into staging and
// placed only after the trailer's entry count, byte count and every file's
// digest (archive.FileDigest) match), Get (the mirror, checked the same way by the host),
// Follow (growing files from offsets, woken by fsnotify), Remove, and for
// session saves Scan (content-defined chunks and their digests, computed
// next to the data; the host's known files streamed in walk order beside
// the walk, ScanStream), ReadChunks (only the chunks the store lacks, each
// re-checked by the host) and, for restores, Restore (stored chunks in,
// each checked against its id before a byte of it is written). A second
// service, Supervisor (Spawn, Status, Signal), runs commands detached from
// the exec that started them, under a supervisor process whose state lives
// in the sandbox (see [Client.Spawn]).
//
// The host's side is [Dial]: one exec runs the cached agent for the
// sandbox's architecture, or describes the sandbox when there is none; ferry
// then streams the build in (zstd, gzip or raw, whatever the sandbox can
// decode; written to a temporary name and renamed, so concurrent installs
// are safe) and runs it. A cached copy that is not a build the host carries
// is replaced. Where the agent cannot run, Dial fails with ErrUnavailable,
// on which auto mode falls back to POSIX mode (package transfer/posix).
package agent
