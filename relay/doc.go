// Package relay runs a process in a remote sandbox and carries its stdin,
// stdout, stderr and exit code exactly: the relay-exec channel that every
// ferry transfer stands on.
//
// The contract is [Execer]. Implementations live in child packages:
// relay/openshell (an OpenShell gateway, over gRPC), relay/sshexec
// (SSH over any connection), relay/local (processes on this machine), and
// relay/gateway is the embedded OpenShell-compatible gateway server.
// relay/relaytest is the conformance suite each of them passes.
package relay
