package frame

import "github.com/klauspost/compress/zstd"

// NewChunkDecoder returns a decoder of chunk frames: one chunk's content
// as zstd, as the session store keeps it and as the agent's ReadChunks
// and Restore carry it. Every decoder of a chunk frame, on the host and
// in the agent, comes from here, so that a frame one of them accepts with
// a bound another does too: a key must not be able to store a frame that
// a restore or a verify of the store then refuses (issue 13).
//
// The decoder refuses a frame whose window, declared content size or
// output is over max bytes, and writes no further than the capacity of
// the dst it is given (zstd.WithDecodeAllCapLimit): the caller passes a
// dst of at least max bytes' capacity, or of the size it expects. It is
// used only through DecodeAll, which is safe for concurrent use and starts
// no goroutine; Close is never needed. max is at least 1 KiB, zstd's
// smallest window.
func NewChunkDecoder(max int) *zstd.Decoder {
	d, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(uint64(max)),
		zstd.WithDecoderMaxWindow(uint64(max)),
		zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		panic(err) // only for invalid options
	}
	return d
}
