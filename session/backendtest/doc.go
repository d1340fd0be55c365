// Package backendtest is the conformance suite of session.Backend: every
// backend (local on disk, local in memory, S3) runs [Run] in its tests.
package backendtest
