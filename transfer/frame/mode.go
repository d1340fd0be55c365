package frame

import "fmt"

// Mode selects how a Writer compresses blocks. The zero value is Auto.
type Mode int

const (
	// Auto compresses a block with zstd when the link, not the
	// compressor, holds the stream back, and sends it only when that
	// measurably pays. The Writer measures the link by its own queue:
	// a block is compressed when the next framed block already waits
	// behind the one being written (a slow link, or a slow receiver), and
	// sent raw when the writing goroutine is waiting for a compressor or
	// for plaintext (a link faster than zstd). The first warmupBlocks
	// blocks are compressed regardless. The encoded block must be at most
	// 97% of the plaintext, else the block is sent raw. After skipAfter
	// consecutive blocks that did not pay, only every skipEvery-th block
	// is tried, so incompressible data (media, archives, random bytes)
	// costs little CPU; one block that pays resumes trying every block.
	Auto Mode = iota
	// Zstd tries every block and sends the zstd form whenever it is smaller
	// than the plaintext at all. A block that zstd would grow is sent raw:
	// expansion never helps the peer.
	Zstd
	// None sends every block raw.
	None
)

// ParseMode parses the --compress flag values "auto", "zstd" and "none".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto":
		return Auto, nil
	case "zstd":
		return Zstd, nil
	case "none":
		return None, nil
	}
	return 0, fmt.Errorf("parse compress mode %q: want auto, zstd or none", s)
}

func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Zstd:
		return "zstd"
	case None:
		return "none"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}
