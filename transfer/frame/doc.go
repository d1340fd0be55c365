// Package frame carries one byte stream (a tar stream, in ferry) between the
// host and the agent in blocks, each zstd-compressed when that pays, and ends
// it with a trailer that lets the receiver prove it got every byte.
//
// Limitations first: plaintext is handed out block by block before the
// trailer is checked, so a consumer must treat it as unverified until Read
// returns io.EOF; the format has no per-block checksum, so corruption inside
// a raw block is found only at the trailer; and a Reader takes no context,
// like archive/tar: cancel by closing the underlying reader.
//
// # Wire format (version 1)
//
// All integers are unsigned big-endian unless stated otherwise.
//
//	stream  = header block* trailer
//	header  = "FRRYFRM" version:u8                  8 bytes; version 0x01
//	block   = type:u8 plain:u32 enc:u32 payload[enc]
//	trailer = kind:u8 total:u64 blocks:u64 sha256[32] crc:u32   53 bytes
//
// Block types:
//
//	0x01 raw   payload is the plaintext; enc == plain
//	0x02 zstd  payload is one or more zstd frames (RFC 8878), skippable
//	           frames allowed, that decode to exactly plain bytes;
//	           0 < enc < plain
//
// Every block has 1 <= plain; a Writer makes every block but the last
// exactly BlockSize bytes of plaintext (default 256 KiB), but a reader must
// not rely on that. In the trailer, total is the sum of all blocks' plain,
// blocks is the number of blocks (the trailer excluded) and sha256 is the
// SHA-256 of the concatenated plaintext (of the empty string for an empty
// stream) when kind is 0xFF; kind 0xFE is a trailer without a digest, its
// sha256 field all zero, which only a Reader told that its consumer checks
// the plaintext itself (ReaderOptions.NoDigest) accepts. crc is the CRC-32C (Castagnoli) of every byte of the stream
// before it, stream header and trailer fields included: it catches flipped
// bits that change no plaintext (a zstd window descriptor, say), so that
// any altered byte is an error. The stream ends after the trailer; a Reader
// does not read whatever follows it on the channel.
//
// # Limits
//
// A Reader checks every block header before reading its payload: plain at
// most MaxBlockSize, a running total at most MaxTotal, and for zstd blocks
// plain <= enc × MaxRatio (default 1000). The decoder is capped at plain
// bytes of output, so a block that decodes to more than it declares is
// refused without allocating what it would decode to. A Writer keeps its
// blocks within MaxRatio by appending a skippable zstd frame (magic
// 0x184D2A50, little-endian size) to a block that compresses better than
// that, e.g. a block of zeros.
//
// # Compression
//
// In Auto mode (--compress auto, the default) a Writer compresses a block
// only when that makes the stream go faster, measured as it goes, like
// zstd --adapt: on a slow link (a gateway across a WAN) compression is the
// point, on a fast one (loopback, a LAN) zstd is slower than the link and
// raw blocks win. A Writer sends blocks from a goroutine of its own; when
// the next block is framed and waiting behind the one being written, the
// link is the bottleneck and the block being cut is compressed; when the
// sender waits instead (for a block being compressed, or for more
// plaintext), the link has room and the block goes raw. The first 16
// blocks (4 MiB by default) are compressed whatever the link, before it
// can be measured, so small streams always are. On a link between the
// two, blocks mix raw and zstd in whatever proportion keeps both the
// compressors and the link busy. A compressed block is sent only if it is
// at most 97% of the plaintext: compressibility is measured on every
// block tried, not guessed from file names. After 4 blocks in a row that
// did not pay, only every 16th block is tried, so incompressible data
// costs about 1/16 of the compression CPU; one block that pays resumes
// trying every block. Zstd mode tries every block and keeps any gain;
// None sends every block raw. A Writer compresses up to
// WriterOptions.Concurrency blocks at once and sends them in order.
package frame
