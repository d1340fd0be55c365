// Package wire is what both ends of an agent connection agree on: the
// hello that opens each direction (Magic, ProtocolVersion, the agent's
// digest), the gRPC codec, buffer pool and options of both ends, the
// net.Conn over an exec's streams, the framing of a tree (Put and Get's
// data messages and their Trailer), the bounds both sides check, and the
// ErrorInfo reasons and metadata keys in which the agent's failures reach
// the host.
//
// It is internal so that the host's client (package agent), the sandbox's
// server (package agent/server) and the detached-run supervisor (package
// agent/supervisor) can share these without either side importing the
// other: the client depends on nothing the sandbox runs, and the agent
// binary carries no host code.
package wire
