// Package session keeps agents' session directories across runs: a
// snapshot store of content-defined chunks and immutable manifests over
// storage backends, and save and restore of a sandbox directory.
//
// So far it holds TaskKey, Rascal's name for a task's session; the store
// itself is issue 5's.
package session
