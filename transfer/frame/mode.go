package frame

import "fmt"

// Mode selects how a Writer compresses blocks. The zero value is Auto.
type Mode int

const (
	// Auto compresses each block with zstd or S2, whichever the Writer
	// measures to make the stream go fastest: zstd where the link is
	// slow, S2 where it is fast (see the package documentation). A
	// block goes raw untried when S2 saves nothing on a 64 KiB sample
	// of it (four slices spread over it), so incompressible data (media,
	// archives, random bytes) costs little CPU. The first 4 MiB of
	// blocks are compressed otherwise, zstd and S2 in turn. The encoded
	// block must be at most 97% of the plaintext, else the block is sent
	// raw. After skipAfter consecutive blocks that did not pay, only
	// every skipEvery-th block is tried; one block that pays resumes
	// trying every block.
	Auto Mode = iota
	// Zstd tries every block and sends the zstd form whenever it is smaller
	// than the plaintext at all. A block that zstd would grow is sent raw:
	// expansion never helps the peer.
	Zstd
	// None sends every block raw.
	None
	// S2 is Zstd with S2 (klauspost/compress/s2, Snappy's faster and
	// denser successor) in place of zstd: several times zstd's speed at
	// somewhat less compression, for links faster than zstd.
	S2
)

// ParseMode parses the --compress flag values "auto", "zstd", "s2" and
// "none".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto":
		return Auto, nil
	case "zstd":
		return Zstd, nil
	case "none":
		return None, nil
	case "s2":
		return S2, nil
	}
	return 0, fmt.Errorf("parse compress mode %q: want auto, zstd, s2 or none", s)
}

func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Zstd:
		return "zstd"
	case None:
		return "none"
	case S2:
		return "s2"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}
