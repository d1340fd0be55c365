package wire_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// FuzzReadHello feeds ReadHello two streams per input, both read in pieces
// of random sizes drawn from split:
//   - banner alone, arbitrary bytes: no panic, no more than
//     maxSkip+HelloLen bytes read, and the outcome of the slow model
//     (check);
//   - banner+hello+payload with the hello written by WriteHello: the same,
//     and whenever the hello's magic is the first in the stream and begins
//     within maxSkip, the hello comes out (or a *VersionError for a version
//     other than ProtocolVersion) and the payload is left unread.
//
// The seed corpus in testdata/fuzz/FuzzReadHello holds banners of login
// shells, partial and pty-mangled magics, and hellos of other versions.
func FuzzReadHello(f *testing.F) {
	f.Add([]byte("Welcome\n"), []byte("payload"), wire.ProtocolVersion, []byte("digest"), uint16(100), uint64(1))
	f.Add([]byte("\xffFERR\xffFERRY\r"), []byte{}, uint16(2), []byte{}, uint16(13), uint64(2))
	f.Fuzz(func(t *testing.T, banner, payload []byte, version uint16, digest []byte, maxSkip uint16, split uint64) {
		check(t, banner, int(maxSkip), split)

		h := wire.Hello{Version: version}
		copy(h.Digest[:], digest)
		data := cat(banner, encoded(t, h), payload)
		check(t, data, int(maxSkip), split)

		if bytes.Index(data, []byte(wire.Magic)) != len(banner) || len(banner) > int(maxSkip) {
			return
		}
		r := newSplitReader(data, split)
		got, err := wire.ReadHello(r, int(maxSkip))
		if version != wire.ProtocolVersion {
			var ve *wire.VersionError
			if !errors.As(err, &ve) || got.Version != version || r.off > len(banner)+wire.HelloLen {
				t.Fatalf("version %d: %v, %v after %d bytes", version, got, err, r.off)
			}
			return
		}
		if err != nil || got != h || !bytes.Equal(data[r.off:], payload) {
			t.Fatalf("got %v, %v; payload left %q, want %q", got, err, data[r.off:], payload)
		}
	})
}
