package wire

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"

	"github.com/klauspost/compress/zstd"

	"github.com/ferry-dev/ferry/transfer/cdc"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// ErrChunk matches a Restore whose chunk does not decode to the content
// its id names: a damaged store, or a damaged relay. *ChunkError says
// which.
var ErrChunk = errors.New("chunk does not match its id")

// ChunkError is a Restore chunk the agent refused: Index counts the
// chunks the call sent, from 0.
type ChunkError struct {
	Index int
	ID    [sha256.Size]byte
	Path  string // the file it belongs to
	Err   error
}

func (e *ChunkError) Error() string {
	return fmt.Sprintf("chunk %d (%x) of %q: %v", e.Index, e.ID, e.Path, e.Err)
}

func (e *ChunkError) Unwrap() error { return ErrChunk }

// ChunkIndex is the metadata key that carries ChunkError.Index.
const ChunkIndex = "chunk"

func chunkMeta(err error) map[string]string {
	var ce *ChunkError
	if !errors.As(err, &ce) {
		return nil
	}
	return map[string]string{ChunkIndex: strconv.Itoa(ce.Index), "entry": ce.Path}
}

// DecodeSlack is room past a chunk's size in its decode buffer: zstd's
// fast decoding loop writes in wide words and needs some, else it falls
// back to a loop a few times slower (measured: decoding was half of a
// restore's CPU with an exact-size buffer). The decoder still stops at
// the cap, so a chunk that decodes long is refused all the same.
const DecodeSlack = 4 << 10

// ReasonChanged is the ErrorInfo reason of a ReadChunks whose file no
// longer holds the chunk the scan saw (the client's ErrChanged).
const ReasonChanged = "CHANGED"

var (
	// ChunkEncoder compresses the chunks ReadChunks sends.
	ChunkEncoder = mustZstd(zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false)))
	// The decoders of chunk frames, of the one configuration every chunk
	// decoder has (frame.NewChunkDecoder): storeChunkDecoder for a chunk
	// of cdc.Default(), the session store's (session.MaxChunkSize), so that
	// a frame ReadChunksStored hands on for such a chunk is one the
	// store's own reader accepts; bigChunkDecoder for the larger chunks
	// of other chunker parameters.
	storeChunkDecoder = frame.NewChunkDecoder(cdc.Default().Max)
	bigChunkDecoder   = frame.NewChunkDecoder(MaxChunk)
)

// ChunkDecoder is the decoder of a frame of a chunk of size bytes: the
// smallest bound that holds it.
func ChunkDecoder(size int64) *zstd.Decoder {
	if size <= int64(cdc.Default().Max) {
		return storeChunkDecoder
	}
	return bigChunkDecoder
}

func mustZstd[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// MaxChunk bounds the chunker's ChunkParams.max and one ChunkRead or
// Restore chunk: the agent holds two chunks of the chunker and one read
// at a time. Both sides check it.
const MaxChunk = 4 << 20

// MaxReads bounds one ReadChunks call.
const MaxReads = 1 << 16
