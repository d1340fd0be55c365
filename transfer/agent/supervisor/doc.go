// Package supervisor is the sandbox's side of detached runs: the
// ferry.agent.v1.Supervisor service (Spawn, Status, Signal) that the
// agent serves beside its Agent service (see Register), and the
// supervisor process itself (Main, the agent binary's `supervise`
// subcommand), which runs one command per state directory, outliving the
// exec that started it, and records it there (spec.json, pid.json,
// exit.json, a lock held for the supervisor's life).
//
// It is a package of its own, apart from the server (package
// agent/server) and the host's client (package agent), because it is a
// process of its own: what it keeps on disk is its protocol with any
// later agent, and it shares nothing with a connection but the request
// paths it resolves (Paths).
package supervisor
