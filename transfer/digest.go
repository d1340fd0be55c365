package transfer

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
// The digest is XXH3-128. It guards against corruption and against bugs
// anywhere between the sender's read and the receiver's write, which is
// its job: it is not a security boundary, since a hostile sender computes
// it as freely as the data. A cryptographic hash cost a quarter of agent
// mode's CPU (SHA-256, measured) for no protection a trailer can give;
// where content names data (the session store's chunks), SHA-256 stays.
type FileDigest struct {
	Name string
	Size int64
	Sum  [DigestSize]byte
}

// DigestSize is the size of FileDigest.Sum.
const DigestSize = 16

// fileHash is the per-file digest's running state.
type fileHash = xxh3.Hasher

func newFileHash() *fileHash { return xxh3.New() }

// sumInto writes h's digest into sum, big-endian.
func sumInto(h *fileHash, sum *[DigestSize]byte) {
	u := h.Sum128()
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
