// Package relaytest is the conformance suite for relay.Execer: every
// implementation runs [Run] against a real peer, so that the contract's
// promises (exact bytes, exit codes, no stdin read-ahead, no orphans, a cut
// relay is an error) hold whichever transport a caller picks.
package relaytest
