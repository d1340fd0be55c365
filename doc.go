// Package ferry is the run lifecycle as a library: copying files into and
// out of a sandbox with cp semantics, pulling a run's artifacts, saving
// and restoring session directories, a whole Option-B run (inputs in,
// command, artifacts out) over any relay.Execer, and a [Launcher] with
// Rascal's four-call runner contract (StartDetached, Inspect, Stop,
// Remove) whose runs live on in the sandbox under the ferry agent's
// supervision, whatever happens to the process that started them.
package ferry
