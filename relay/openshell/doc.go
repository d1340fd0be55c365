// Package openshell is a relay.Execer for an OpenShell gateway, and a small
// client for the sandbox lifecycle RPCs ferry needs.
//
// Exec runs through ExecSandboxInteractive, with tty=false unless the
// Command asks for a terminal: stdin streams in chunks well under the
// gateway's 1 MiB message limit, and EOF on stdin is a half-close of the
// request stream. A TTY command's Size goes out as the start's cols and rows
// and each Resize as a resize message, as the OpenShell CLI's `exec --tty`
// sends them. A gateway that answers UNIMPLEMENTED is
// served through the one-shot ExecSandbox instead, whose stdin must fit in
// one message. A stream that ends without an exit event, or UNAVAILABLE, is
// relay.ErrRelayLost.
//
// [SSH] is the other transport: SSH over the gateway's ForwardTcp relay,
// run by relay/sshexec, with one connection and one CreateSshSession token
// per sandbox.
//
// Settings come from where OpenShell users already keep them (see Resolve).
package openshell
