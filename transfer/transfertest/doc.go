// Package transfertest holds test helpers for code that moves trees:
// RandomTree draws a tree with the cases that break archivers (symlinks,
// dangling ones included, empty directories, modes, nanosecond mtimes,
// non-ASCII and long names, deep paths, zero-byte and big files), EqualTrees
// and Compare check that two trees are the same, and CheckSafe checks the
// promises of an extracted tree (nothing special, no setuid, no symlink out).
// DeadPID names a process that is gone, for the stale-owner checks of
// staging directories and of the agent's interrupted installs.
package transfertest
