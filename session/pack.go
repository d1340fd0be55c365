package session

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Pack files. A store written with Config.Pack keeps new chunks in packs
// of about Config.PackSize bytes rather than one object per chunk, so that
// a save or a restore of thousands of chunks makes tens of requests to S3,
// not thousands (restic's repository layout does the same).
//
//	pack   "packs/<2 hex>/<64 hex>", the hex being the SHA-256 of the pack:
//	       blob 0 | blob 1 | ... | index body | uint32 len(index body) | "ferrypk1"
//	       each blob one stored chunk (one zstd frame, as in chunks/...);
//	       the trailer (index body and footer) makes a pack self-describing.
//	index  "index/<64 hex>", the same hex as its pack's: the pack's index
//	       body alone, so that a reader learns where every chunk is with
//	       one small GET per pack.
//	body   "ferryix1" | uint32 count | count × (32-byte chunk ID,
//	       uint32 offset, uint32 stored length), big-endian.
//
// The pack's name authenticates the whole pack, trailer included: a reader
// that fetched a pack and found it hashing to its name trusts its trailer
// over the index object, which only says which pack to fetch.
const (
	packPrefix  = "packs/"
	indexPrefix = "index/"
	indexMagic  = "ferryix1"
	packMagic   = "ferrypk1"

	// Sizes, untyped so that they mix with int and int64: the magics
	// are 8 bytes, a chunk ID 32.
	indexHeaderSize = 8 + 4
	indexEntrySize  = 32 + 4 + 4
	packFooterSize  = 4 + 8

	// MaxPackSize bounds what is read of a pack. Config.PackSize is at
	// most half of it, and a pack is sealed once it reaches PackSize, so
	// one stored chunk over it at most.
	MaxPackSize = 64 << 20
	// maxPackEntries bounds a pack's chunks: a stored chunk is at least a
	// zstd frame header and a block, well over 16 bytes.
	maxPackEntries = MaxPackSize / 16
	// maxIndexSize bounds what is read of an index object.
	maxIndexSize = indexHeaderSize + maxPackEntries*indexEntrySize
)

// packEntry is where one stored chunk is in a pack.
type packEntry struct {
	ID       ID
	Off, Len uint32
}

// packName is the object of pack id.
func packName(id ID) string {
	s := id.String()
	return packPrefix + s[:2] + "/" + s
}

// parsePackName is packName's inverse; ok is false for other names.
func parsePackName(name string) (ID, bool) {
	rest, ok := strings.CutPrefix(name, packPrefix)
	if !ok || len(rest) != 2+1+64 || rest[2] != '/' {
		return ID{}, false
	}
	id, err := ParseID(rest[3:])
	return id, err == nil && rest[:2] == rest[3:5]
}

// indexName is the index object of pack id.
func indexName(id ID) string { return indexPrefix + id.String() }

// parseIndexName is indexName's inverse.
func parseIndexName(name string) (ID, bool) {
	rest, ok := strings.CutPrefix(name, indexPrefix)
	if !ok {
		return ID{}, false
	}
	id, err := ParseID(rest)
	return id, err == nil
}

// PackObjectID reports whether name is where a Backend holds a pack,
// "packs/<2 hex>/<64 hex>", and the pack's ID (the SHA-256 of its bytes).
func PackObjectID(name string) (ID, bool) { return parsePackName(name) }

// CheckPackObject checks data, the bytes of pack id's object, as a read of
// the pack does: at most MaxPackSize bytes that hash to id, with a trailer
// that parses. An error matches ErrChunkCorrupt. A cache in front of a
// Backend uses it to serve only packs a read would accept.
func CheckPackObject(id ID, data []byte) error {
	_, err := checkPack(id, data)
	if err != nil {
		return &PackError{Object: packName(id), Reason: err.Error()}
	}
	return nil
}

// checkPack checks that data hashes to id and returns its trailer's
// entries.
func checkPack(id ID, data []byte) ([]packEntry, error) {
	if len(data) > MaxPackSize {
		return nil, fmt.Errorf("over %d bytes", MaxPackSize)
	}
	if sha256.Sum256(data) != id {
		return nil, errors.New("content does not hash to its name (damaged or truncated)")
	}
	return parsePackTrailer(data)
}

// appendIndex appends the index body of es to dst.
func appendIndex(dst []byte, es []packEntry) []byte {
	dst = append(dst, indexMagic...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(es)))
	for _, e := range es {
		dst = append(dst, e.ID[:]...)
		dst = binary.BigEndian.AppendUint32(dst, e.Off)
		dst = binary.BigEndian.AppendUint32(dst, e.Len)
	}
	return dst
}

// parseIndex parses an index body. Every entry must be a stored chunk of
// 1 to maxStoredChunk bytes lying within the first dataEnd bytes of its
// pack, and no chunk may appear twice; entries need not be in order.
// Bodies come from the store: they are untrusted.
func parseIndex(body []byte, dataEnd int64) ([]packEntry, error) {
	if len(body) < indexHeaderSize || string(body[:len(indexMagic)]) != indexMagic {
		return nil, errors.New("index: bad magic")
	}
	n := binary.BigEndian.Uint32(body[len(indexMagic):])
	if n > maxPackEntries || int64(len(body)) != int64(indexHeaderSize)+int64(n)*indexEntrySize {
		return nil, fmt.Errorf("index: %d bytes for %d entries", len(body), n)
	}
	es := make([]packEntry, n)
	seen := make(map[ID]bool, n)
	p := body[indexHeaderSize:]
	for i := range es {
		e := &es[i]
		copy(e.ID[:], p)
		e.Off = binary.BigEndian.Uint32(p[32:])
		e.Len = binary.BigEndian.Uint32(p[36:])
		p = p[indexEntrySize:]
		if e.Len == 0 || e.Len > maxStoredChunk || int64(e.Off)+int64(e.Len) > dataEnd {
			return nil, fmt.Errorf("index: chunk %s at %d+%d: outside the pack's %d data bytes", e.ID, e.Off, e.Len, dataEnd)
		}
		if seen[e.ID] {
			return nil, fmt.Errorf("index: chunk %s twice", e.ID)
		}
		seen[e.ID] = true
	}
	return es, nil
}

// packTrailerSize returns the size of the index body that the footer,
// the last packFooterSize bytes of a pack of size bytes, announces.
func packTrailerSize(footer []byte, size int64) (int64, error) {
	if len(footer) != packFooterSize || string(footer[4:]) != packMagic {
		return 0, errors.New("trailer: bad magic")
	}
	n := int64(binary.BigEndian.Uint32(footer))
	if n < int64(indexHeaderSize) || n > maxIndexSize || n > size-packFooterSize {
		return 0, fmt.Errorf("trailer: index of %d bytes in a pack of %d", n, size)
	}
	return n, nil
}

// parsePackTrailer returns the entries of a whole pack's trailer.
func parsePackTrailer(pack []byte) ([]packEntry, error) {
	size := int64(len(pack))
	if size < packFooterSize {
		return nil, fmt.Errorf("trailer: pack of %d bytes", size)
	}
	n, err := packTrailerSize(pack[size-packFooterSize:], size)
	if err != nil {
		return nil, err
	}
	end := size - packFooterSize - n
	return parseIndex(pack[end:size-packFooterSize], end)
}

// sealPack appends the trailer of es to blobs (the pack's chunks, in the
// order and at the offsets es gives) and returns the pack and its ID.
func sealPack(blobs []byte, es []packEntry) ([]byte, ID) {
	start := len(blobs)
	pack := appendIndex(blobs, es)
	pack = binary.BigEndian.AppendUint32(pack, uint32(len(pack)-start))
	pack = append(pack, packMagic...)
	return pack, sha256.Sum256(pack)
}

// PackError is a fault of one pack or index object: the object is
// missing, damaged, or disagrees with the other, so the chunk being read
// (Chunk, zero if none) cannot be had from it. It matches ErrChunkMissing
// for a missing pack, else ErrChunkCorrupt.
type PackError struct {
	Object  string // "packs/..." or "index/..."
	Chunk   ID
	Missing bool
	Reason  string
}

func (e *PackError) Error() string {
	var b strings.Builder
	b.WriteString("session: ")
	if e.Chunk != (ID{}) {
		fmt.Fprintf(&b, "chunk %s: ", e.Chunk)
	}
	if e.Missing {
		fmt.Fprintf(&b, "%s: missing", e.Object)
	} else {
		fmt.Fprintf(&b, "%s: %s", e.Object, e.Reason)
	}
	return b.String()
}

// Is matches ErrChunkMissing or ErrChunkCorrupt.
func (e *PackError) Is(target error) bool {
	return (target == ErrChunkMissing && e.Missing) || (target == ErrChunkCorrupt && !e.Missing)
}
