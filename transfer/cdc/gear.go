package cdc

import (
	"crypto/sha256"
	"encoding/binary"
)

// gear is FastCDC's table of 256 random 64-bit values. It is derived, not
// drawn: entry i is the first 8 bytes (big endian) of
// SHA-256("ferry cdc gear" || byte(i)). Changing it changes every boundary.
var gear = func() (g [256]uint64) {
	for i := range g {
		sum := sha256.Sum256(append([]byte("ferry cdc gear"), byte(i)))
		g[i] = binary.BigEndian.Uint64(sum[:8])
	}
	return g
}()
