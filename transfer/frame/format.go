package frame

// Wire constants; doc.go describes the layout they make up.
const (
	magic      = "FRRYFRM\x01" // 7 bytes of magic, then the version byte
	headerSize = len(magic)

	typeRaw     = 0x01
	typeZstd    = 0x02
	typeS2      = 0x03
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
	zstdWindow = 4
	// queueExtra is how many framed blocks may wait for the sender beyond
	// Concurrency being compressed.
	queueExtra = 2

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
}
