// Package session keeps agents' session directories across runs: a
// snapshot store of content-defined chunks and immutable manifests over a
// storage [Backend], with save ([Store.Save]) from a [Source] and restore
// ([Store.Restore]) into a local directory, [Store.List], [Store.Verify]
// and [Store.Prune]. [TaskKey] is Rascal's name for a task's session.
//
// Glossary:
//
//   - chunk: a piece of a file's content cut by content-defined chunking
//     (package transfer/cdc, FastCDC, 8 to 128 KiB, 32 KiB on average),
//     stored zstd-compressed under the SHA-256 of its plaintext, its [ID]:
//     "chunks/<2 hex>/<64 hex>". Reading a chunk always re-hashes it.
//   - manifest: zstd-compressed JSON describing one snapshot: every
//     directory, file and symlink with its permission bits, nanosecond
//     mtime, size, symlink target and chunk list, and the totals ([Manifest]).
//     Readers validate it as untrusted input.
//   - key: the name of one session ([ValidKey]); usually a [TaskKey].
//   - snapshot: a committed manifest, "snapshots/<key>/<seq>", seq counting
//     1, 2, ... per key. Snapshots are never changed, only pruned.
//   - commit: the exclusive creation of the next sequence number's manifest,
//     after every chunk it references has been written. Of two saves that
//     start from the same snapshot, exactly one commits; the other gets a
//     [*ConflictError] (errors.Is [ErrConflict]) and commits nothing. A
//     crash before the commit leaves only unreferenced chunks, which a retry
//     reuses and [Store.Prune] removes after the grace period.
//
// Saves dedup against the whole store. A [DirSource] with ReuseUnchanged
// takes a file's chunk list from the previous snapshot when its size and
// mtime match, without reading it; Restore keeps mtimes, so a restored,
// untouched tree saves with no new bytes. A Source that is not local (ferry's
// agent in a sandbox) chunks next to the data, asks [Sink.Has] and sends
// only missing chunks through [Sink.Put]; the Sink accepts no entry that
// references a chunk neither stored nor confirmed.
//
// Memory is bounded by chunk and buffer sizes and by the manifest (one entry
// per path), never by file sizes.
//
// # Choice of chunker
//
// Measured with BenchmarkChunkers in transfer/cdc (2-core AMD EPYC,
// Go 1.26), on issue 5's workload: 40 JSONL transcripts, 128 MiB in all,
// then 1% appended to 4 of them. Throughput is cutting plus SHA-256 of
// every chunk; new/appended is the plaintext of chunks not seen before the
// append over the bytes appended (1.0 would be perfect).
//
//	chunker (avg)        MB/s   bytes/chunk   new/appended
//	FastCDC 8 KiB         552       9314         1.23
//	FastCDC 16 KiB        542      18617         1.33
//	FastCDC 32 KiB        584      37224         1.46
//	FastCDC 64 KiB        557      73631         1.80
//	restic  16 KiB        289      20007         1.31
//	restic  32 KiB        291      39433         1.67
//	restic  64 KiB        295      79004         1.93
//
// Cutting alone: FastCDC about 750-1070 MB/s, restic/chunker about
// 300 MB/s. At equal average size both dedup an append about as well
// (the tail chunk of a grown file is stored again), and FastCDC is twice
// as fast with SHA-256 and about three times as fast alone, so ferry uses
// its own small FastCDC (no dependency, fixed gear table). 32 KiB is the
// average: it stores about 1.5 times the appended bytes on this workload,
// where 16 KiB would store 1.3 times but double the chunk count (manifest
// size, objects in the store, Has look-ups from the agent).
package session
