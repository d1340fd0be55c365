package frame

import "time"

// Wire constants; doc.go describes the layout they make up.
const (
	magic      = "FRRYFRM\x01" // 7 bytes of magic, then the version byte
	headerSize = len(magic)

	typeRaw  = 0x01
	typeZstd = 0x02
	typeS2   = 0x03
	// typeStream carries the next piece of one zstd frame that all the
	// stream's blocks of this type share (see doc.go).
	typeStream  = 0x04
	typeTrailer = 0xFF
	// typeTrailerNoDigest is a trailer whose sha256 field is zero: the
	// writer left the digest to its caller (WriterOptions.NoDigest).
	typeTrailerNoDigest = 0xFE

	blockHeaderSize = 1 + 4 + 4          // type, plaintext length, encoded length
	trailerSize     = 1 + 8 + 8 + 32 + 4 // type, total bytes, block count, sha256, crc32c

	// DefaultBlockSize is WriterOptions.BlockSize when it is zero.
	DefaultBlockSize = 256 << 10
	// DefaultMaxBlockSize is ReaderOptions.MaxBlockSize when it is zero.
	DefaultMaxBlockSize = 4 << 20
	// DefaultMaxRatio is WriterOptions.MaxRatio and ReaderOptions.MaxRatio
	// when zero.
	DefaultMaxRatio = 1000
	// MaxBlockSizeLimit bounds both BlockSize and MaxBlockSize.
	MaxBlockSizeLimit = 64 << 20

	// Auto mode's skip heuristic (see Auto).
	skipAfter = 4
	skipEvery = 16
	// Auto tries every block of its warmup (a small stream, or the start
	// of one, before the link can be measured), then only blocks the
	// link is waiting for. The warmup is warmupBytes of plaintext, in
	// minWarmup to warmupBlocks blocks: up to half of them go to zstd,
	// which at 1 MiB blocks and 16 would cost 8 MiB at zstd's pace.
	warmupBlocks = 16
	minWarmup    = 4
	warmupBytes  = 4 << 20
	// Auto tries the codec it does not use on the probeEvery-th block,
	// to keep its measure current: rarely, since on a fast link that
	// codec is zstd, several times S2's cost (at 16, probes took a tenth
	// of an upload's CPU). Each probe that leaves the pick as it was
	// doubles the gap to the next, up to probeMax; a switch resets it.
	probeEvery = 64
	probeMax   = 512
	// hysteresisPct is how far apart Auto's thresholds for switching to
	// raw and back are, in percent.
	hysteresisPct = 25
	// Auto's measures average over about the last linkWindow bytes of
	// wire for the link and zstdWindow blocks tried for the compressor.
	linkWindow = 4 << 20
	// blockedPace is the Write time per wire byte from which Auto counts
	// a Write as having waited for the link (2 GB/s): a Write into a
	// channel with room takes about a memory copy's time.
	blockedPace = 0.5e-9
	zstdWindow  = 4
	// queueExtra is how many framed blocks may wait for the sender beyond
	// Concurrency being compressed.
	queueExtra = 2

	// StreamWindow bounds the window of the zstd frame that stream blocks
	// share: a Writer uses it, a Reader refuses a larger one, and it is
	// about the memory each holds for the history. 8 MiB of agent JSONL
	// history compresses it 0.117 of its size against 0.127 with 4 MiB
	// and 0.160 with independent 1 MiB blocks (klauspost's default level).
	StreamWindow = 8 << 20
	// WANRTT is the round trip (WriterOptions.RTT) from which Auto takes a
	// link for a WAN's: a LAN's and loopback's are far under it (the
	// bench's lan: 1 ms), a region's far over (40 ms).
	WANRTT = 10 * time.Millisecond
	// streamLenSize is a stream block's inner length field: how many of
	// its payload's bytes belong to the zstd frame, before zero padding.
	streamLenSize = 4
	// streamIdle is how many blocks the stream may go unused before its
	// frame is ended and its encoder's memory let go (endStream):
	// StreamWindow at the agent's 1 MiB blocks, so that data that
	// compresses again soon still finds its history.
	streamIdle = 8
	// sampleSize is how much of a block Auto compresses with S2, in
	// sampleParts slices, to see whether the data compresses at all
	// before it tries a codec on the block.
	sampleSize  = 64 << 10
	sampleParts = 4
	// minBuffer is the size of a stream's first block, and of the first
	// buffer a Writer gathers plaintext in. Each next block is twice the
	// last, up to BlockSize: after maxRamp blocks at most, since
	// minBuffer doubled that many times is MaxBlockSizeLimit.
	minBuffer = 64 << 10
	// rawBlock bounds the blocks of a raw run (see Writer.limit).
	rawBlock = 256 << 10
	maxRamp  = 10
	// autoMaxPct is the most a block Auto compresses may take of its
	// plaintext, in percent: more, and it is sent raw.
	autoMaxPct = 97

	// skippable zstd frame (RFC 8878 section 3.1.2): magic 0x184D2A50 and
	// a 4-byte little-endian size, both little-endian, then that many bytes.
	skippableHeaderSize = 8
)

// Stats counts what crossed a Writer or Reader so far.
type Stats struct {
	Plaintext  int64 // payload bytes (before compression / after decompression)
	Wire       int64 // framed bytes, headers and trailer included
	RawBlocks  int64
	ZstdBlocks int64
	S2Blocks   int64
	// StreamBlocks counts blocks that continue the stream's shared zstd
	// frame (typeStream); ZstdBlocks counts those with a frame of their
	// own.
	StreamBlocks int64
}
