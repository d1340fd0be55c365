// Package session keeps agents' session directories across runs: a
// snapshot store of content-defined chunks and immutable manifests over a
// storage [Backend], with save ([Store.Save]) from a [Source] and restore
// ([Store.Restore]) into a local directory, [Store.List], [Store.Verify]
// and [Store.Prune]. [TaskKey] is Rascal's name for a task's session.
//
// Saving and restoring a sandbox's directory, in both transfer modes, is
// here too: [Store.SaveFrom], [Store.RestoreTo] and [Store.RepairFrom]
// take a transfer.Remote. In agent mode the agent chunks and hashes next
// to the data and the store's chunks travel as stored; in POSIX mode the
// directory is downloaded and chunked on the host, and a restore streams
// the tree as tar after checking every chunk.
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
//   - lock: "locks/save/<random>" or "locks/prune/<random>", a small JSON
//     object a Save or a Prune keeps renewed while it runs, so that each
//     knows of the other (below).
//
// Saves dedup against the whole store. A [DirSource] with ReuseUnchanged
// takes a file's chunk list from the previous snapshot when its size and
// mtime match, without reading it; Restore keeps mtimes, so a restored,
// untouched tree saves with no new bytes. A Source that is not local (ferry's
// agent in a sandbox, [AgentSource]) chunks next to the data and sends
// every chunk through [Sink.Put] but those of the save's parent, which it
// may claim by ID; the Sink accepts no entry that references a chunk
// neither stored nor confirmed. Dedup against other keys then saves store
// writes, not wire bytes (next section).
//
// # What a key learns of other keys
//
// Every key shares the store, and a sandbox, ferry's agent in it
// included, may be hostile. What a sandbox sees is what the host asks it
// in a save, and what a restore sends it:
//
//   - Chunk IDs: only those of its own data. A save asks for chunks by
//     the IDs the agent itself reported; a restore sends the entries and
//     chunks of one snapshot of the key. No other key's manifest, chunk
//     list or name reaches it.
//   - Contents: only of its own snapshots. A chunk ID from the agent is a
//     claim: a save takes it without the chunk's bytes only for a chunk of
//     its parent (the key's own newest snapshot, which the sandbox was
//     restored from) that the store still holds, or one the same save has
//     received already. Every other chunk the agent names is fetched from
//     it and must hash to its ID, so knowing the ID of another key's chunk
//     is not enough to put it in a snapshot and restore it.
//   - Existence: which chunks a save fetches depends only on the agent's
//     answers and on the parent, never on what other keys stored: a
//     claimed chunk another key holds is fetched all the same (and not
//     written again), so a save is no oracle of chunk existence, not even
//     for content the sandbox holds (a keyed proof followed by a fetch of
//     what the store lacks would still say which it lacks). Sink.Has,
//     which answers for the whole store, is left to sources that read the
//     bytes on the host (DirSource, and the POSIX-mode save that downloads
//     the tree first). Which of the parent's chunks the store lost shows
//     (they are fetched again), but those are the key's own.
//   - Sizes: nothing of other keys; a save's manifest totals (NewBytes
//     counts only chunks the store lacked) go to the host's caller, not to
//     the sandbox.
//
// Limitations, both about content the sandbox already holds, so both
// confirm at most that another key stored the same content before:
// timing, as the host writes only a fetched chunk the store lacks, and
// the pace at which it reads the agent's stream follows its uploads; and
// the frame a restore sends, which is the one the chunk was first stored
// with (an agent's frame is kept as it came, zstd's skippable frames and
// choice of encoding included), so a sandbox that marks its own frames
// can tell another writer's. Closing the second would take the host
// re-encoding every fetched chunk itself.
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
// # What Prune may remove, and what a Save may reuse
//
// A save references chunks it did not write: those of the snapshot it
// starts from (its parent), and any other the store holds that the Source
// asks about through Sink.Has. A Prune that removes the parent (OlderThan,
// Rascal's TTL) and then its chunks while the save is in flight would let
// the save commit a snapshot that cannot be restored, and every later save
// of the key, which starts from that one, would inherit the hole. The
// grace period alone cannot prevent it: it protects chunks that are new,
// not an old chunk a save decides to reuse. So saves and prunes meet
// through lock objects in the store itself, which works alike on a local
// directory and on S3 shared by several nodes, with no server:
//
//   - A save first writes "locks/save/<random>" naming its key, and reads
//     back the object's ModTime: its start S, by the backend's clock.
//     A prune first writes "locks/prune/<random>". Each renews its lock
//     every LockTTL/6 and removes it when done.
//   - After its lock is written, a save lists the prune locks and waits
//     while a live one is there; only then does it list the key's
//     snapshots and load its parent. After its lock is written, a prune
//     lists the save locks. Each writes before it reads, so of a save and
//     a prune that overlap, at least one sees the other (the store-buffer
//     argument; the backend must be strongly consistent for a listing
//     after a Put, as local disks and S3 since 2020 are): either the prune
//     sees the save's lock, or the save sees the prune's and starts only
//     after the prune is over, from what it left.
//   - A prune that sees a live save lock of key K does not remove K's
//     newest readable snapshot, whatever Keep or OlderThan say (it reports
//     it as Deferred; the next prune removes it). That snapshot is the
//     save's parent: if a newer one appeared meanwhile, the save cannot
//     commit (its sequence number is taken) and needs nothing. A kept
//     snapshot keeps its chunks. Idle (Rascal's session TTL, by key)
//     never removes a key a live save lock names: the key is in use, and
//     keeps every snapshot.
//   - A save reuses a chunk that is not its parent's only if the chunk's
//     last Put is after S - Grace/2 ("fresh"); it writes an older one
//     again, which renews it. A prune that sees a live save lock removes
//     no chunk or pack at all: it may have listed a stale chunk just
//     before a save renewed it, and would remove the renewed chunk after
//     (no store offers a delete conditional on a ModTime). It reports why
//     (ChunksKept), and a later prune that meets no save removes them;
//     one that meets none removes a chunk only if its last Put is before
//     now - Grace. A save that overlaps such a prune saw its lock and
//     waits for it, so no chunk a save may reference is removed under it.
//   - A save's parent chunks are checked at its start: those the store
//     lost (damage, or a store written before locks) are sent again, so a
//     broken snapshot does not break the next one.
//   - A lock is live until LockTTL past its last ModTime, by the reader's
//     clock. A holder trusts its lock only for 3/4 of LockTTL after the
//     start of its last successful renewal; a save whose lock lapsed
//     commits nothing, and a prune whose lock lapsed removes nothing more
//     ([ErrLockLost]). The quarter left over is the margin for skew between
//     a node's clock and the backend's; the rest of the protocol compares
//     only times of one clock (the backend's ModTimes) or durations.
//   - A lock left by a process that died keeps its key's newest snapshot
//     and its chunks for LockTTL, and makes saves wait at most LockTTL
//     behind a dead prune; then Prune removes it (StaleLocks). A lock that
//     cannot be read makes Prune keep every key's newest snapshot and
//     remove no chunk.
//
// A manifest that cannot be read is never a save's parent (saves go on
// past it, committing the next sequence number) and never counted among
// the snapshots Keep keeps; OlderThan removes it by its object's age.
// Restores take no lock: a restore that a prune overtakes fails with a
// missing chunk, it never writes a wrong file.
//
// restic solves the same problem with a lock that prune takes
// exclusively, so that no backup runs while prune does. Here a prune
// never stops a save already running, and one that starts meanwhile waits
// only for the prune's own run, not for every other save: with Rascal
// saving sessions all day, an exclusive lock would leave prune waiting
// for a gap that never comes.
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
