// Package treediff is the workspace diff: a manifest of a sandbox
// directory (each entry's path, type, permission bits, size, content
// digest and symlink target, in walk order), taken in agent mode next to
// the data without moving file contents and in POSIX mode from a
// downloaded copy, and the diff of two manifests (created, deleted,
// modified with what changed) that `ferry run --diff` writes to
// workspace-diff.json and `ferry diff` prints.
//
// Both modes name a file's content by the same digest: the SHA-256 of
// the concatenated SHA-256s of its content-defined chunks as
// cdc.Default() cuts them (the chunk IDs a session save stores), which
// ferry's agent computes where the file lies. So a manifest taken in one
// mode compares with one taken in the other.
//
// Everything a manifest holds came from a sandbox, or from a file a user
// saved (`ferry diff --since`): it is input, checked entry by entry with
// the rules a download applies (clean relative names, none twice, each
// inside a directory of the manifest, archive.Limits' counts and sizes,
// symlinks that stay inside the directory).
//
// Glossary: a manifest lists one directory at one moment; a change is one
// path that differs between two; a report is the diff of one directory,
// and a document is the workspace-diff.json of a run, one report a
// directory.
package treediff
