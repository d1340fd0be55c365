// Package agent is the in-sandbox side of ferry's agent mode: a small static
// binary that the host streams into the sandbox over the exec channel and
// then talks to over that same channel, so that hashing, compression and
// the following of growing files happen next to the data (DESIGN.md, "The
// agent").
//
// What exists so far is the handshake that precedes everything else on the
// channel, in each direction: the agent writes a [Hello] on its stdout and
// the host writes one on the agent's stdin, each Magic, the protocol
// version and the SHA-256 of the agent binary, in HelloLen bytes.
// [ReadHello] skips what precedes the magic (a login shell's banner, at
// most a bound of it), reports output without a hello as a [*NoMagicError]
// that shows what came instead, a peer of another version as a
// [*VersionError], and never reads past the hello, so the caller hands the
// same stream on to gRPC with nothing lost.
//
// Issue 4 adds the rest: the gRPC service ferry.agent.v1 served on the
// agent's stdin and stdout after the handshake (probe, put, get, follow,
// remove), its main package, and the host's install and dial. Until then
// ferry moves files in POSIX mode (package transfer/posix) only.
package agent
