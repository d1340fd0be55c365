package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// MaxChunkSize is the largest chunk the store accepts: cdc.Default's Max.
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
// allocate more.
var (
	encoder         = must(zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1)))
	chunkDecoder    = must(zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxChunkSize+1)))
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
// does not decode or hash matches ErrChunkCorrupt.
func readChunk(ctx context.Context, b Backend, id ID, buf []byte) ([]byte, error) {
	r, err := b.Get(ctx, chunkName(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read chunk %s: %w", id, ErrChunkMissing)
	}
	if err != nil {
		return nil, fmt.Errorf("read chunk %s: %w", id, err)
	}
	defer r.Close()
	stored, err := io.ReadAll(io.LimitReader(r, maxStoredChunk+1))
	if err != nil {
		return nil, fmt.Errorf("read chunk %s: %w", id, err)
	}
	if len(stored) > maxStoredChunk {
		return nil, fmt.Errorf("read chunk %s: %w: over %d bytes stored", id, ErrChunkCorrupt, maxStoredChunk)
	}
	plain, err := chunkDecoder.DecodeAll(stored, buf[:0])
	if err != nil {
		return nil, fmt.Errorf("read chunk %s: %w: %v", id, ErrChunkCorrupt, err)
	}
	if len(plain) > MaxChunkSize || Hash(plain) != id {
		return nil, fmt.Errorf("read chunk %s: %w: content does not match its id", id, ErrChunkCorrupt)
	}
	return plain, nil
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
