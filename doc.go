// Package ferry is the run lifecycle as a library, under a sandbox's idle
// timeout: copying files into and out of a sandbox with cp semantics
// (over package transfer), pulling a run's artifacts ([Pull]), saving and
// restoring session directories (over package session), a whole run
// (inputs in, command, artifacts out, sessions saved: [Run]) over any
// relay.Execer, live follow ([Follow]), workspace diffs ([Manifest],
// [Diff]; a run's --diff), the gateway's audit log
// ([PullAudit]), and a [Launcher]: four calls (StartDetached, Inspect,
// Stop, Remove) whose runs live on in the sandbox under the ferry agent's
// supervision, whatever happens to the process that started them.
//
// Each of those is a file of its own, and the package imports only
// downwards: session, transfer and relay, never cmd or the packages that
// build on it. It knows no orchestrator's layout: package rascal lays
// Rascal's runs out over the Launcher.
package ferry
