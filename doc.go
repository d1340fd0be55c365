// Package ferry is the run lifecycle as a library, under a sandbox's idle
// timeout: copying files into and out of a sandbox with cp semantics
// (package transfer), pulling a run's artifacts, saving and restoring
// session directories (package session), a whole Option-B run (inputs in,
// command, artifacts out) over any relay.Execer, and a [Launcher] with
// Rascal's four-call runner contract (StartDetached, Inspect, Stop,
// Remove) whose runs live on in the sandbox under the ferry agent's
// supervision, whatever happens to the process that started them.
package ferry
