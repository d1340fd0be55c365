package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/ferry-dev/ferry/transfer/frame"
)

// MaxChunkSize is the largest chunk the store accepts: cdc.Default()'s Max.
const MaxChunkSize = 128 << 10

const chunkPrefix = "chunks/"

// chunkName is where chunk id lives: "chunks/<first two hex digits>/<hex>".
func chunkName(id ID) string {
	s := id.String()
	return chunkPrefix + s[:2] + "/" + s
}

// parseChunkName is chunkName's inverse; ok is false for other names.
func parseChunkName(name string) (ID, bool) {
	rest, ok := strings.CutPrefix(name, chunkPrefix)
	if !ok || len(rest) != 2+1+64 || rest[2] != '/' {
		return ID{}, false
	}
	id, err := ParseID(rest[3:])
	return id, err == nil && rest[:2] == rest[3:5]
}

// The package's zstd codecs, used only through EncodeAll and DecodeAll,
// which are safe for concurrent use and start no goroutines. Each decoder
// refuses output over its bound, so a hostile object cannot make it
// allocate more. chunkDecoder is every chunk decoder's configuration
// (frame.NewChunkDecoder), the one the agent's ReadChunks checks a
// fetched frame with before the store keeps it: a frame one key stores,
// every reader accepts. It writes no further than its dst's capacity,
// which must be MaxChunkSize.
var (
	encoder         = must(zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1)))
	chunkDecoder    = frame.NewChunkDecoder(MaxChunkSize)
	manifestDecoder = must(zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxManifestDecoded)))
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// maxStoredChunk bounds what is read of a stored chunk: zstd's worst case
// for incompressible data is a little over the input.
const maxStoredChunk = MaxChunkSize + MaxChunkSize/64 + 1024

// readChunk fetches chunk id, decompresses it into buf's storage and checks
// that it hashes to id. A missing chunk matches ErrChunkMissing; one that
// does not decode or hash matches ErrChunkCorrupt (a *PackError naming the
// pack when it came from one).
func (s *Store) readChunk(ctx context.Context, id ID, buf []byte) ([]byte, error) {
	stored, pack, err := s.storedChunk(ctx, id, nil)
	if err != nil {
		return nil, err
	}
	bad := func(reason string) error {
		if pack != "" {
			return &PackError{Object: pack, Chunk: id, Reason: reason}
		}
		return fmt.Errorf("read chunk %s: %w: %s", id, ErrChunkCorrupt, reason)
	}
	if cap(buf) < MaxChunkSize {
		buf = make([]byte, 0, MaxChunkSize)
	}
	plain, err := chunkDecoder.DecodeAll(stored, buf[:0])
	if err != nil {
		return nil, bad(err.Error())
	}
	if len(plain) > MaxChunkSize || Hash(plain) != id {
		return nil, bad("content does not match its id")
	}
	return plain, nil
}

// storedChunk returns chunk id as stored (one zstd frame) and the pack it
// came from ("" for a loose chunk): from the pack the view places it in,
// else from its loose object, read into buf's storage when it fits. A
// result from a pack aliases the cached pack: the caller copies what it
// keeps.
func (s *Store) storedChunk(ctx context.Context, id ID, buf []byte) ([]byte, string, error) {
	if s.cfg.Pack {
		if err := s.refreshIfOlder(ctx, forever); err != nil {
			return nil, "", err
		}
		if loc, ok, _ := s.packed(id); ok {
			data, err := s.readPacked(ctx, id, loc)
			return data, packName(loc.pack), err
		}
	}
	data, err := s.getLoose(ctx, id, buf)
	if !errors.Is(err, ErrChunkMissing) {
		return data, "", err
	}
	// Not loose: it may be in a pack the view does not know yet (a store
	// that does not pack reads packs too, and another writer may have
	// stored one since the last refresh).
	if rerr := s.refreshIfOlder(ctx, time.Second); rerr != nil {
		return nil, "", rerr
	}
	if loc, ok, _ := s.packed(id); ok {
		data, err := s.readPacked(ctx, id, loc)
		return data, packName(loc.pack), err
	}
	return nil, "", err
}

// forever is a refreshIfOlder age that refreshes only a view never loaded.
const forever = time.Duration(1<<63 - 1)

// getLoose reads the loose object of chunk id into buf's storage (when it
// fits maxStoredChunk+1), unchecked. A missing one matches
// ErrChunkMissing; one over the stored size bound, ErrChunkCorrupt.
func (s *Store) getLoose(ctx context.Context, id ID, buf []byte) ([]byte, error) {
	r, err := s.b.Get(ctx, chunkName(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read chunk %s: %w", id, ErrChunkMissing)
	}
	if err != nil {
		return nil, fmt.Errorf("read chunk %s: %w", id, err)
	}
	defer r.Close()
	out := buf[:0]
	if cap(out) < maxStoredChunk+1 {
		out = make([]byte, 0, maxStoredChunk+1)
	}
	for len(out) < cap(out) {
		n, err := r.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read chunk %s: %w", id, err)
		}
	}
	if len(out) > maxStoredChunk {
		return nil, fmt.Errorf("read chunk %s: %w: over %d bytes stored", id, ErrChunkCorrupt, maxStoredChunk)
	}
	return out, nil
}

// writeChunk compresses data and stores it as chunk id, replacing any
// object of that name (which renews its ModTime).
func writeChunk(ctx context.Context, b Backend, id ID, data []byte, scratch []byte) (stored int, err error) {
	z := encoder.EncodeAll(data, scratch[:0])
	if err := b.Put(ctx, chunkName(id), bytes.NewReader(z), false); err != nil {
		return 0, fmt.Errorf("write chunk %s: %w", id, err)
	}
	return len(z), nil
}
