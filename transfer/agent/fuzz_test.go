package agent_test

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ferry-dev/ferry/transfer/agent"
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
	f.Add([]byte("Welcome\n"), []byte("payload"), agent.ProtocolVersion, []byte("digest"), uint16(100), uint64(1))
	f.Add([]byte("\xffFERR\xffFERRY\r"), []byte{}, uint16(2), []byte{}, uint16(13), uint64(2))
	f.Fuzz(func(t *testing.T, banner, payload []byte, version uint16, digest []byte, maxSkip uint16, split uint64) {
		check(t, banner, int(maxSkip), split)

		h := agent.Hello{Version: version}
		copy(h.Digest[:], digest)
		data := cat(banner, wire(t, h), payload)
		check(t, data, int(maxSkip), split)

		if bytes.Index(data, []byte(agent.Magic)) != len(banner) || len(banner) > int(maxSkip) {
			return
		}
		r := newSplitReader(data, split)
		got, err := agent.ReadHello(r, int(maxSkip))
		if version != agent.ProtocolVersion {
			var ve *agent.VersionError
			if !errors.As(err, &ve) || got.Version != version || r.off > len(banner)+agent.HelloLen {
				t.Fatalf("version %d: %v, %v after %d bytes", version, got, err, r.off)
			}
			return
		}
		if err != nil || got != h || !bytes.Equal(data[r.off:], payload) {
			t.Fatalf("got %v, %v; payload left %q, want %q", got, err, data[r.off:], payload)
		}
	})
}

// FuzzCodecUnmarshal feeds Codec.Unmarshal arbitrary bytes as each of the
// data messages it parses by hand, cut into frames of random sizes drawn
// from split: whenever the hand parser takes the input, proto.Unmarshal
// gives exactly that message, and in every case Unmarshal gives what
// proto.Unmarshal gives, error or message (checkLikeProto).
func FuzzCodecUnmarshal(f *testing.F) {
	for _, k := range dataKinds {
		for _, p := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte{0xab}, 200)} {
			wire, err := proto.Marshal(k.wrap(p))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(wire, uint64(1))
			f.Add(append(wire, wire...), uint64(2))
		}
	}
	f.Add([]byte{0x12, 0x83, 0x00, 'a', 'b', 'c'}, uint64(3))
	f.Add([]byte{0x0a, 0x80, 0x80, 0x80, 0x80, 0x00}, uint64(4))
	f.Add([]byte{0x1a, 0x02, 'a', 'b', 0x78, 0x01}, uint64(5))
	f.Fuzz(func(t *testing.T, wire []byte, split uint64) {
		for _, k := range dataKinds {
			checkLikeProto(t, k, wire, randomSplit(wire, split))
		}
	})
}
