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
//   - pack: with [Config.Pack] (the CLI sets it for S3), new chunks are
//     stored several MiB at a time in one object,
//     "packs/<2 hex>/<SHA-256 of the pack>", as stored, followed by a
//     trailer listing each chunk's ID, offset and length, so that a pack
//     describes itself. Reading a pack checks it against its name.
//   - index: "index/<the pack's hex>", a copy of a pack's trailer, so that
//     a reader learns where every chunk is from a listing and one small
//     GET per pack; it is written after its pack and before any manifest
//     that needs it. A store may hold loose chunks and packs side by side:
//     every read, Verify and Prune understands both.
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
// Memory is bounded by chunk, pack and buffer sizes, never by file sizes.
// A save's is not bounded by the file count either: it holds its entries,
// and the files of the snapshot it starts from ([Parent]), as compact
// records in a spill (4 MiB in memory, sorted runs in a private, unlinked
// temp file beyond), reads and writes manifests as streams, and streams
// the known files to the agent in walk order. What still grows with the
// tree is the set of chunk IDs the save has confirmed (about 65 bytes a
// chunk: 20 MiB at 300,000) and the directory paths a manifest's parents
// are checked against. Restore, Verify and Prune hold a whole manifest.
//
// # Why packs
//
// On S3 every object is a request: a 128 MiB session is about 3,300
// chunks, and versitygw on a 2-core loopback host answers about 1,800
// HEADs or 1,000 PUTs a second, so loose chunks made a save or restore
// there 3 to 7 times slower than on a local directory. With packs a save
// makes two PUTs per pack and its look-ups are listings; a restore lists,
// GETs the index objects it has not seen and each pack once, a few packs
// ahead of the stream ([Store.ReadAhead]); package session/cache keeps
// packs whole on the node, and serves the chunks of a pack the restore
// comes back to (files share chunks) from there. Without a cache such a
// chunk costs one ranged GET.
// A local directory keeps one file per chunk: packing it measured no
// faster to restore and used more memory.
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
