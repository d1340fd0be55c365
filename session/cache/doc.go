// Package cache keeps a node's chunks on its local disk, in front of a
// shared session store's backend (S3), so that a node never downloads a
// chunk it already has: [Backend] is a session.Backend decorator.
//
// What is cached: chunk objects ("chunks/...") and packs ("packs/...",
// whole), as stored, whenever they are read from the backend or written to
// it. Everything else (manifests, index objects, listings) goes to the
// backend every time.
//
// What the cache is trusted with: nothing. Every hit is checked as a read
// of the store checks it (a chunk must decode to content that hashes to
// its ID, [session.CheckChunkObject]; a pack must hash to its name and
// have a trailer that parses, [session.CheckPackObject]); a damaged entry
// is removed and the object fetched again. Chunks are named by the SHA-256 of their
// content, so one cache may serve several stores. Stat always asks the
// backend: a cached chunk is no proof that the store still holds it, and
// a save that skipped uploading it on that evidence could commit a
// snapshot the store cannot restore.
//
// Layout and bounds: <dir>/<2 hex>/<64 hex> for chunks and
// <dir>/packs/<2 hex>/<64 hex> for packs, directories 0700 and files
// 0600, each written to a temporary file and renamed into place, so that
// processes can share the directory. Past Config.MaxBytes the least
// recently used entries go (a hit renews an entry's mtime; atime is not
// used, as noatime and relatime mounts do not keep it).
//
// Limitations: a store audit (session.Store.Verify) must not read through
// the cache, or it would check the cached copies rather than the store's;
// open the store without it for that. The cache saves downloads, not
// requests: in a store of loose chunks a restore that first looks every
// chunk up (session.Store.CheckPresent) still makes one request per
// chunk, as does a save's look-up of each chunk; a store that packs looks
// chunks up in listings and index objects instead. A range of a pack is
// served from the cached pack but not cached itself: a process checks a
// cached pack whole once and keeps it open (at most 64), as cache files
// are only ever replaced by rename; a pack file changed in place behind
// an open one is not seen until the next process. Each process counts
// the cache's size once, on its first write, by walking the directory;
// the count is exact again whenever the bound is crossed.
package cache
