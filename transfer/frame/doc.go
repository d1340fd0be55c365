// Package frame carries one byte stream (a tar stream, in ferry) between the
// host and the agent in blocks, each compressed (zstd or S2) when that pays, and ends
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
//	0x03 s2    payload is one S2 block (klauspost/compress/s2, a
//	           Snappy block extended) whose stated length is plain;
//	           0 < enc < plain
//	0x04 stream payload is zlen:u32, then zlen bytes that continue the
//	           one zstd stream all the stream's 0x04 blocks share, then
//	           zero padding; given every 0x04 block before it, its zlen
//	           bytes decode to exactly plain bytes, neither short of its
//	           end nor past it; 0 < zlen, 4 < enc <= plain + plain/1024
//	           + 64 (a block that does not compress still goes, as zstd
//	           raw blocks: the encoder's history holds it); the zstd
//	           stream is one frame or several, one after another (a
//	           block may end one and begin the next), each with a
//	           window of at most StreamWindow (8 MiB)
//
// Every block has 1 <= plain; a Writer makes a stream's first block
// 64 KiB of plaintext, each next one twice the last up to BlockSize
// (default 256 KiB), and every block from there but the last exactly
// BlockSize, or 256 KiB at most after a block it sent raw untried, but
// a reader must not rely on that. In the trailer, total
// is the sum of all blocks' plain, blocks is the number of blocks (the
// trailer excluded) and sha256 is the
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
// most MaxBlockSize, a running total at most MaxTotal, and for compressed
// blocks plain <= enc × MaxRatio (default 1000; a stream block's padding
// counts in enc, as a skippable frame does); an S2 block's stated
// length must be plain before it is decoded. The decoder is capped at plain
// bytes of output, so a block that decodes to more than it declares is
// refused without allocating what it would decode to. A Writer keeps its
// blocks within MaxRatio by appending a skippable zstd frame (magic
// 0x184D2A50, little-endian size) to a block that compresses better than
// that, e.g. a block of zeros; S2 has no padding, so a block S2 would
// make denser than that goes as zstd.
//
// # Compression
//
// In Auto mode (--compress auto, the default) a Writer compresses each
// block with zstd or S2, whichever makes the stream go fastest, measured as
// it goes, like zstd --adapt, and sends raw what does not compress. It
// measures the link by its own queue: the time its sender goroutine spends
// in the underlying Write per wire byte is about nothing while the link
// keeps up, and the link's pace once blocks back up behind it; it counts a
// byte at no less than WriterOptions.WireCost, since bytes on a relay cost
// CPU at the far end even when the link keeps up. It measures each codec's
// CPU time (per thread, so a busy machine does not inflate it) and output
// per byte on the blocks it tries. A codec gains the link time of the bytes
// it saves less its own time; Auto picks the greater gain, with some
// hysteresis: zstd on a slow link (a gateway across a WAN), where its extra
// saving is worth its time; S2, several times faster at somewhat less
// compression, on a fast one (loopback and LANs, where the relay's and the
// receiver's CPU is the limit, and S2 costs less than relaying the bytes
// it saves). The codec it does not pick is probed on the 64th block to
// keep its measure current, then at gaps that double (to 512 blocks)
// while the pick holds. The first 4 MiB (4 to 16 blocks) are compressed
// whatever the link, before the link can be measured, so small streams
// always are: zstd first, then S2 in turn with it. An S2 trial made
// before the link is measured, or in the warmup or as a probe beside zstd
// where zstd may pay, is compressed with zstd too and the smaller block
// is sent: on a slow link a trial costs CPU, not wire bytes. A channel
// that buffers (a relay's flow-control windows, WriterOptions.Buffered)
// returns its first Writes at once whatever the link: until that much has
// gone, Auto uses zstd, as on a link it has not measured, unless the round
// trip (WriterOptions.RTT) is a LAN's: then S2, as on a fast link, until
// the link shows otherwise. zstd is tried again,
// in the warmup or as a probe, only while it may pay: while the wire
// bytes S2 sends would take the link longer than zstd's extra time over
// S2 (at least S2's own time before zstd is measured). On loopback that
// spares a tenth of the compression CPU. A compressed block is sent only
// if it is at most 97% of the plaintext: compressibility is measured on
// every block tried, not guessed from file names. After 4 blocks in a row
// that did not pay, only every 16th block is tried, so incompressible
// data costs about 1/16 of the compression CPU; one block that pays
// resumes trying every block. Zstd and S2 modes try every block with
// their codec and keep any gain; None sends every block raw. A Writer
// compresses up to WriterOptions.Concurrency blocks at once and sends them
// in order.
//
// Independent blocks cannot refer to what came before them: on a link
// slower than one zstd encoder, Auto sends stream blocks instead, one
// encoder's pieces of a single frame whose 8 MiB window spans blocks
// (agent JSONL: 0.117 of its size, against 0.160 as separate blocks),
// made one at a time, in order, on top of the blocks being compressed.
// Auto goes to the stream when WriterOptions.RTT says the link is a WAN's
// (a round trip of WANRTT or more, or not yet measured), unless the link it measured
// is at least four times its channel's buffers and fast enough that
// separate blocks on Concurrency threads go quicker; on a shorter round
// trip, when the measured link is slower than the one encoder. The round
// trip is needed because a channel's buffers (a relay's windows, several
// MiB) take in a whole transfer before its link can be measured. A block
// that did not pay, and every block after it until one pays, goes outside
// the stream, where what does not compress is sent raw. A stream unused
// for a few blocks is ended, so that its encoder's memory goes; stream
// blocks after that begin a new frame.
package frame
