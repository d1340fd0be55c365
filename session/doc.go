// Package session keeps agents' session directories across runs: a
// snapshot store of content-defined chunks and immutable manifests over
// storage backends, and save and restore of a sandbox directory.
//
// Nothing is implemented yet; the package exists so that the layout of
// DESIGN.md holds from the start.
package session
