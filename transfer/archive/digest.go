package archive

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// FileDigest is one regular file of an archive, as the sender wrote it or
// the receiver extracted it: its name (cleaned, slash-separated, without
// "./": the name ExtractOptions.Select is asked about), its size and the
// digest of its data. It is computed in the pass that copies the data,
// never by reading the file again. A sender's list and a receiver's list
// of the same stream are equal, in the same order: the end-to-end check
// of a trailer (DESIGN.md, "Rules everywhere").
//
// The digest is XXH3-128 over the XXH3-128 of each 32 KiB segment of the
// data and its length (see fileHash). It guards against corruption and
// against bugs anywhere between the sender's read and the receiver's
// write, which is its job: it is not a security boundary, since a hostile
// sender computes it as freely as the data. A cryptographic hash cost a quarter of agent
// mode's CPU (SHA-256, measured) for no protection a trailer can give;
// where content names data (the session store's chunks), SHA-256 stays.
type FileDigest struct {
	Name string
	Size int64
	Sum  [DigestSize]byte
}

// DigestSize is the size of FileDigest.Sum.
const DigestSize = 16

// segmentSize is the span of data each inner hash covers.
const segmentSize = 32 << 10

// fileHash is the per-file digest's running state. It hashes the data in
// segments, each in one call straight from the caller's buffer, and feeds
// their hashes to a second hash: xxh3.Hasher alone copies every byte
// through its internal buffer after the first write, which measured as
// much CPU as the hashing itself on both ends of a transfer. Segments are
// cut at fixed offsets of the file, so the digest is the same however the
// data is split into writes (only a segment cut across two writes is
// copied).
type fileHash struct {
	outer   *xxh3.Hasher
	pending []byte // the start of the current segment, shorter than a segment
	size    uint64
}

func newFileHash() *fileHash {
	return &fileHash{outer: xxh3.New(), pending: make([]byte, 0, segmentSize)}
}

// Reset starts the digest of another file.
func (h *fileHash) Reset() {
	h.outer.Reset()
	h.pending = h.pending[:0]
	h.size = 0
}

// Write adds p to the digest. It never fails.
func (h *fileHash) Write(p []byte) (int, error) {
	n := len(p)
	h.size += uint64(n)
	if len(h.pending) > 0 {
		k := copy(h.pending[len(h.pending):segmentSize], p)
		h.pending = h.pending[:len(h.pending)+k]
		p = p[k:]
		if len(h.pending) < segmentSize {
			return n, nil
		}
		h.segment(h.pending)
		h.pending = h.pending[:0]
	}
	for len(p) >= segmentSize {
		h.segment(p[:segmentSize])
		p = p[segmentSize:]
	}
	h.pending = append(h.pending, p...)
	return n, nil
}

func (h *fileHash) segment(p []byte) {
	u := xxh3.Hash128(p)
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], u.Hi)
	binary.BigEndian.PutUint64(b[8:], u.Lo)
	h.outer.Write(b[:])
}

// sumInto writes h's digest into sum, big-endian. It ends the file: Reset
// before the next one.
func sumInto(h *fileHash, sum *[DigestSize]byte) {
	if len(h.pending) > 0 {
		h.segment(h.pending)
		h.pending = h.pending[:0]
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], h.size)
	h.outer.Write(b[:])
	u := h.outer.Sum128()
	binary.BigEndian.PutUint64(sum[:8], u.Hi)
	binary.BigEndian.PutUint64(sum[8:], u.Lo)
}

// DigestOf is FileDigest.Sum of data held in memory.
func DigestOf(data []byte) [DigestSize]byte {
	h := newFileHash()
	h.Write(data)
	var sum [DigestSize]byte
	sumInto(h, &sum)
	return sum
}
