// Package gateway is ferry's embedded OpenShell-compatible gateway: the
// openshell.v1.OpenShell gRPC service over sandboxes that are plain
// directories on this machine.
//
// Limitations first: it isolates nothing. Commands run as the gateway's own
// user with the gateway's view of the filesystem; a "sandbox" is only a
// working directory and a HOME. It exists so that ferry (and any OpenShell
// client) can be tested and demonstrated end to end without a cluster, and
// so it copies the real gateway's behaviour where a client can observe it:
// `/bin/bash -lc` with `cd <workdir> && K=v args...`, a cleared environment,
// the message, argument and environment limits, exit code 124 on timeout,
// exit code 1 for a signal-killed child, UNAVAILABLE when the relay drops,
// NOT_FOUND and FAILED_PRECONDITION for unknown and unready sandboxes,
// and tty=true on a real pseudo-terminal as upstream's sandbox allocates
// one: TERM=xterm-256color, stderr merged into stdout, the one-shot RPC's
// terminal one cell (upstream asks for 0x0), the streaming RPC's the
// start's cols and rows (80x24 when unset) and resized by its resize
// messages, and stdin's end no EOF to the process.
// Where upstream leaves an exec's processes behind (its timeout, a client
// that went away, a relay that dropped, a refused message mid-stream), so
// does this gateway: the process gets its stdin's EOF (on a terminal, no
// more input and no hangup), its output is read and dropped, and it runs
// on until it ends or its sandbox does. After a process's exit, its
// output is waited for as upstream's supervisor waits (2 s for the first
// stream to end, 1 s for the second) before the exit is reported; a
// background child that still holds it is left running, its output
// dropped. A client
// must stop such processes itself (relay/openshell does, by relay.MarkVar).
// Unlike upstream's supervisor, which starts them in its own process
// group, this gateway starts each in a session of its own, so that none
// shares the terminal of whoever runs the gateway; ferry's clients do not
// rely on either.
//
// Workspaces are upstream's namespaces of sandbox names (workspaces.go):
// "default" always exists, others are made with CreateWorkspace, and a
// request naming one that does not exist is NOT_FOUND. A sandbox of the
// default workspace is the directory Root/<name>, one of workspace w is
// Root/.ws/<w>/<name>; the records are under Root/.gateway. A root left
// by a gateway before workspaces loads as it was.
//
// Every inbound message is held to upstream's 1 MiB, refused as upstream's
// tonic refuses it (oversize.go), which Register and ServerOptions
// together arrange.
//
// The SSH relay (CreateSshSession, RevokeSshSession, ForwardTcp) is served
// by an SSH server inside the gateway, as the sandbox supervisor serves it:
// auth "none" for any user, a new Ed25519 host key at every start, exec
// and shell through the same login shell and cleared environment as exec
// RPCs, env requests acknowledged and ignored, the sftp subsystem,
// direct-tcpip to loopback only, pty-req and window-change. Upstream's relay limits hold:
// 3 connections per token, 20 per sandbox, 64 KiB data frames, tokens
// valid 86400s (Config.SSHSessionTTL). A revoked or expired token opens no
// new connection; open ones run on until they end. A session's process,
// on a terminal or not, outlives its channel and its connection, as an
// exec's outlives its RPC, and its exit is reported after the same waits.
// As upstream's supervisor does, a signal request is ignored (it signals
// only its canonical main session), and a process killed by a signal
// reports exit-status 1, never exit-signal.
//
// StopSandbox ends every process of a sandbox (its execs, its SSH
// connections, and what they detached: each sandbox's processes live in a
// cgroup of their own, procs_linux.go) and revokes its SSH tokens, keeping
// its directory; DeleteSandbox ends them all the same before removing it;
// StartSandbox brings it back through STARTING to READY. CreateSandbox
// checks spec.policy as upstream does before anything exists, and stores
// it as sent, fields this proto does not model included: records are kept
// in binary proto.
package gateway
