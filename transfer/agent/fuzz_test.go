package agent_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
)

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
