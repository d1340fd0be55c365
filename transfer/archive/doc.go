// Package archive is the tar layer under every transfer: a streaming tar
// writer for local trees ([Writer]) and the hardened extractor for what
// comes back ([Extract]), with the limits, placements and per-file digests
// both remote modes (POSIX tools or ferry's agent) share.
//
// Agent-mode uploads, whose both ends are ferry's, use [FormatEntries]
// instead of tar: the same entries and metadata in a stream with no
// blocks, padding or PAX records, which the extractor reads through the
// same checks. Parsing tar headers was a third of the agent's CPU in an
// upload of many small files.
//
// The extractor treats every byte as hostile (DESIGN.md, "Rules
// everywhere"). It writes only through an os.Root opened on a staging
// directory beside the destination and renames the tree into place once
// the whole stream has been read and checked, so a refused or cut stream
// leaves nothing behind. A staging directory is locked (flock) while it is
// live; one whose extraction was killed outright is removed by the next
// Extract that stages in the same directory ([RemoveStaleStaging]), which
// never touches a live one. It refuses absolute names and ".." components,
// entries outside the names a download asked for ([ErrUnrequested]),
// devices, FIFOs, sparse files and unknown entry types, writes through
// symlinks and type swaps of paths the stream created, symlinks that
// resolve outside the tree (also through chains of other symlinks), hard
// links to anything not extracted earlier from the same stream, and
// anything over [Limits]. It
// drops setuid, setgid and sticky bits and chowns only when asked and
// running as root. Every refusal is an [*EntryError] naming the entry, whose
// cause matches [ErrUnsafePath], [ErrLinkEscape], [ErrLimit], [ErrTruncated]
// or [ErrUnsupported] under errors.Is.
//
// Limitations: absolute symlinks are always refused, even ones a tree
// legitimately holds (a Python venv's bin/python): they point outside the
// destination by definition. Placement is a sequence of renames; one that
// fails midway leaves earlier ones done. archive/tar is the tar codec, so
// its own bounds apply as well (1 MiB per extended header).
package archive
