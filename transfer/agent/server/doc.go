// Package server is the sandbox's side of agent mode: Serve answers one
// connection (its hello, then gRPC service ferry.agent.v1 on the same
// streams) with one method per operation, in one file each: Probe, Stat,
// Put, Get, Follow, Remove, Scan and ScanStream, ReadChunks, Restore. It
// registers the detached-run service of package agent/supervisor beside
// them. cmd/ferry-agent is its main.
//
// It is apart from the host's client (package agent) so that the agent
// binary carries no host code and the host no sandbox code; what both
// ends agree on (hello, codec, tree framing, error reasons) is in
// agent/internal/wire. The server trusts the host no more than it must: it
// checks every path, bound and header before it acts on it.
package server
