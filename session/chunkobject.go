package session

import (
	"fmt"
	"sync"
)

// ChunkObjectID reports whether name is where a Backend holds a chunk,
// "chunks/<2 hex>/<64 hex>", and which chunk.
func ChunkObjectID(name string) (ID, bool) { return parseChunkName(name) }

// CheckChunkObject checks stored, the bytes of chunk id's object, as a
// read of the chunk does: they must decode to at most MaxChunkSize bytes
// that hash to id. An error matches ErrChunkCorrupt. A cache in front of
// a Backend uses it to serve only chunk objects a read would accept.
func CheckChunkObject(id ID, stored []byte) error {
	if len(stored) > maxStoredChunk {
		return fmt.Errorf("chunk %s: %w: over %d bytes stored", id, ErrChunkCorrupt, maxStoredChunk)
	}
	buf := checkBufs.Get().(*[]byte)
	defer checkBufs.Put(buf)
	plain, err := chunkDecoder.DecodeAll(stored, (*buf)[:0])
	if err != nil {
		return fmt.Errorf("chunk %s: %w: %v", id, ErrChunkCorrupt, err)
	}
	if len(plain) > MaxChunkSize || Hash(plain) != id {
		return fmt.Errorf("chunk %s: %w: content does not match its id", id, ErrChunkCorrupt)
	}
	return nil
}

// checkBufs holds CheckChunkObject's plaintext buffers.
var checkBufs = sync.Pool{New: func() any { b := make([]byte, 0, MaxChunkSize); return &b }}
