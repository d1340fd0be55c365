// Package ferry is the run lifecycle as a library: copying files into and
// out of a sandbox with cp semantics, pulling a run's artifacts, and a
// whole Option-B run (inputs in, command, artifacts out) over any
// relay.Execer.
package ferry
