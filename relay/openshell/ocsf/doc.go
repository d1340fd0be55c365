// Package ocsf reads the security events an OpenShell sandbox reports
// (OCSF v1.8.0, as upstream's crates/openshell-ocsf builds them) out of the
// gateway's sandbox log, into ferry's own normalized Event: its class
// (network, process, finding, or other with its class_uid), the
// allowed/denied decision, the destination, the process, the time and the
// severity.
//
// Upstream carries an event in a SandboxLogLine with level "OCSF", target
// "ocsf" and source "sandbox", its message the event's single-line
// shorthand (format_shorthand, e.g. `NET:OPEN [MED] DENIED
// /usr/bin/curl(64) -> httpbin.org:443 [policy:- engine:opa]`), not its
// JSON: the full OCSF JSON goes only to the sandbox's own
// /var/log/openshell-ocsf.*.log when ocsf_json_enabled is set. Parse reads
// both forms: a message that is a JSON object is read as the full event.
// The shorthand is lossy by upstream's design (no action on a process
// event, a reason cut at 256 bytes, a message at 120), and Event says
// only what the line said.
//
// Limitations first: a log line is untrusted input from the sandbox and
// the gateway. A line over MaxLineBytes, a line that names no known class,
// or JSON of the wrong shape or types is skipped and counted, never
// guessed at; fields are clipped to MaxFieldBytes.
package ocsf
