package execcodec

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/grpcbuf"
)

var sizes = []int{0, 1, 2, 127, 128, 129, 255, 256, 257, 16383, 16384, 16385, 256<<10 - 64, 256 << 10, 1 << 20, 4<<20 + 3}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// split cuts b into a BufferSlice at the given offsets (clamped, sorted).
func split(b []byte, at ...int) mem.BufferSlice {
	var s mem.BufferSlice
	prev := 0
	for _, a := range at {
		a = min(max(a, prev), len(b))
		s = append(s, mem.SliceBuffer(b[prev:a]))
		prev = a
	}
	return append(s, mem.SliceBuffer(b[prev:]))
}

// splits are the ways a message of n bytes is cut: whole, 16 KiB frames as
// HTTP/2 delivers them, one byte at a time through the header, and cuts
// inside the header and at the payload's edges.
func splits(n int) [][]int {
	s := [][]int{nil, {0}, {n}, {1}, {2}, {3}, {4}, {5}, {1, 2, 3, 4, 5, 6}, {n / 2}, {n - 1}, {3, n - 1}}
	var frames []int
	for o := 16 << 10; o < n; o += 16 << 10 {
		frames = append(frames, o)
	}
	return append(s, frames)
}

func events(data []byte) []*openshellv1.ExecSandboxEvent {
	return []*openshellv1.ExecSandboxEvent{
		{Payload: &openshellv1.ExecSandboxEvent_Stdout{Stdout: &openshellv1.ExecSandboxStdout{Data: data}}},
		{Payload: &openshellv1.ExecSandboxEvent_Stderr{Stderr: &openshellv1.ExecSandboxStderr{Data: data}}},
	}
}

// TestUnmarshalSizes checks the hand parser against proto.Marshal's output
// for payloads of many sizes, cut into frames at many points.
func TestUnmarshalSizes(t *testing.T) {
	for _, n := range sizes {
		data := pattern(n)
		msgs := []proto.Message{&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Stdin{Stdin: data}}}
		for _, e := range events(data) {
			msgs = append(msgs, e)
		}
		for _, want := range msgs {
			wire, err := proto.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			for _, at := range splits(len(wire)) {
				got := want.ProtoReflect().New().Interface()
				if err := (Codec{}).Unmarshal(split(wire, at...), got); err != nil {
					t.Fatalf("%T of %d bytes split at %v: %v", want, n, at, err)
				}
				if !proto.Equal(got, want) {
					t.Fatalf("%T of %d bytes split at %v: got a different message", want, n, at)
				}
				if p := payloadOf(got); n > 0 && fast(n) && cap(p)&(cap(p)-1) != 0 {
					t.Fatalf("%T of %d bytes: payload of cap %d is not from the pool", want, n, cap(p))
				}
				Release(payloadOf(got))
			}
		}
	}
}

// fast reports whether a payload of n bytes comes from a pool class.
func fast(n int) bool { return n <= 4<<20 }

func payloadOf(m proto.Message) []byte {
	switch m := m.(type) {
	case *openshellv1.ExecSandboxInput:
		return m.GetStdin()
	case *openshellv1.ExecSandboxEvent:
		if m.GetStdout() != nil {
			return m.GetStdout().GetData()
		}
		return m.GetStderr().GetData()
	}
	return nil
}

// TestMarshalIsProto checks that the codec puts on the wire exactly what
// gRPC's proto codec does.
func TestMarshalIsProto(t *testing.T) {
	pc := encoding.GetCodecV2(protocodec.Name)
	for _, n := range sizes {
		data := pattern(n)
		msgs := []any{
			&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Stdin{Stdin: data}},
			&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Start{Start: &openshellv1.ExecSandboxRequest{SandboxId: "x", Command: []string{"cat"}}}},
			&openshellv1.ExecSandboxEvent{Payload: &openshellv1.ExecSandboxEvent_Exit{Exit: &openshellv1.ExecSandboxExit{ExitCode: 3}}},
		}
		for _, e := range events(data) {
			msgs = append(msgs, e)
		}
		for _, m := range msgs {
			got, err := Codec{}.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			want, err := pc.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Materialize(), want.Materialize()) {
				t.Fatalf("%T of %d bytes: the wire differs from the proto codec's", m, n)
			}
			got.Free()
			want.Free()
		}
	}
	if (Codec{}).Name() != "proto" {
		t.Fatalf("Name() = %q", Codec{}.Name())
	}
}

// TestUnmarshalFallback checks that messages the parser does not take
// still decode as proto decodes them.
func TestUnmarshalFallback(t *testing.T) {
	for _, m := range []proto.Message{
		&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Start{Start: &openshellv1.ExecSandboxRequest{SandboxId: "x", Command: []string{"cat"}, Stdin: []byte("hi")}}},
		&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Resize{Resize: &openshellv1.ExecSandboxWindowResize{Cols: 80, Rows: 24}}},
		&openshellv1.ExecSandboxEvent{Payload: &openshellv1.ExecSandboxEvent_Exit{Exit: &openshellv1.ExecSandboxExit{ExitCode: 3}}},
		&openshellv1.ExecSandboxEvent{Payload: &openshellv1.ExecSandboxEvent_Stdout{Stdout: &openshellv1.ExecSandboxStdout{}}},
		&openshellv1.ExecSandboxEvent{},
		&openshellv1.ExecSandboxInput{},
		&openshellv1.HealthResponse{Version: "v"},
	} {
		wire, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		// A field the schema does not know, after the message.
		wire = protowire.AppendBytes(protowire.AppendTag(wire, 99, protowire.BytesType), []byte("x"))
		want := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(wire, want); err != nil {
			t.Fatal(err)
		}
		got := m.ProtoReflect().New().Interface()
		if err := (Codec{}).Unmarshal(split(wire, 1), got); err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("%T: got %v, want %v", m, got, want)
		}
	}
	// A stdin message with a second stdin field: the last one wins.
	wire := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte("first"))
	wire = protowire.AppendBytes(protowire.AppendTag(wire, 2, protowire.BytesType), []byte("second"))
	var got openshellv1.ExecSandboxInput
	if err := (Codec{}).Unmarshal(split(wire), &got); err != nil {
		t.Fatal(err)
	}
	if string(got.GetStdin()) != "second" {
		t.Fatalf("stdin = %q, want the last field's", got.GetStdin())
	}
	// Invalid input is proto's error, not a panic or a message.
	if err := (Codec{}).Unmarshal(split([]byte{0x12, 0x05, 'a'}), &got); err == nil {
		t.Fatal("a truncated message decoded")
	}
}

// TestUnmarshalResets checks that a reused message keeps nothing of its
// previous contents, as proto.Unmarshal resets it.
func TestUnmarshalResets(t *testing.T) {
	m := &openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Start{Start: &openshellv1.ExecSandboxRequest{SandboxId: "x"}}}
	m.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	wire, _ := proto.Marshal(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Stdin{Stdin: []byte("abc")}})
	if err := (Codec{}).Unmarshal(split(wire), m); err != nil {
		t.Fatal(err)
	}
	if string(m.GetStdin()) != "abc" || len(m.ProtoReflect().GetUnknown()) != 0 {
		t.Fatalf("got %v", m)
	}
}

// TestDebug checks the checks that tests of the data path rely on: a
// released payload is poisoned, and a second release panics.
func TestDebug(t *testing.T) {
	Debug(true)
	defer Debug(false)
	wire, _ := proto.Marshal(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Stdin{Stdin: pattern(1000)}})
	var m openshellv1.ExecSandboxInput
	if err := (Codec{}).Unmarshal(split(wire), &m); err != nil {
		t.Fatal(err)
	}
	b := m.GetStdin()
	Release(b)
	if b[0] != Poison || b[999] != Poison || b[:cap(b)][cap(b)-1] != Poison {
		t.Fatal("a released payload is not poisoned")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("a second release did not panic")
			}
		}()
		Release(b)
	}()
}

// FuzzParse checks the codec against proto.Unmarshal: for any input, cut
// anywhere, Unmarshal gives what proto.Unmarshal gives, or both fail (the
// parser alone: grpcbuf's FuzzField).
func FuzzParse(f *testing.F) {
	for _, n := range []int{0, 1, 127, 128, 300} {
		data := pattern(n)
		for _, m := range []proto.Message{
			&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Stdin{Stdin: data}},
			events(data)[0], events(data)[1],
		} {
			wire, _ := proto.Marshal(m)
			f.Add(wire, uint16(1), uint16(3))
		}
	}
	f.Add([]byte{0x12, 0x83, 0x00, 'a', 'b', 'c'}, uint16(2), uint16(2))
	f.Add([]byte{0x0a, 0x05, 0x0a, 0x03, 'a', 'b', 'c', 0x10, 0x01}, uint16(0), uint16(5))
	f.Fuzz(func(t *testing.T, wire []byte, a, b uint16) {
		data := split(wire, int(a), int(b))
		for _, m := range []proto.Message{&openshellv1.ExecSandboxInput{}, &openshellv1.ExecSandboxEvent{}} {
			want := m.ProtoReflect().New().Interface()
			werr := proto.Unmarshal(wire, want)
			got := m.ProtoReflect().New().Interface()
			gerr := (Codec{}).Unmarshal(data, got)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("%T: proto.Unmarshal: %v, Unmarshal: %v", m, werr, gerr)
			}
			if werr == nil && !proto.Equal(got, want) {
				t.Fatalf("%T: got %v, want %v", m, got, want)
			}
			Release(payloadOf(got))
		}
	})
}

// BenchmarkUnmarshal compares the codec with gRPC's proto codec on a stdin
// message cut into 16 KiB frames, as HTTP/2 delivers it, with the ferry
// binary's buffer pool installed as gRPC's default.
func BenchmarkUnmarshal(b *testing.B) {
	grpcbuf.Install()
	pc := encoding.GetCodecV2(protocodec.Name)
	for _, n := range []int{256<<10 - 64, 16 << 10} {
		wire, _ := proto.Marshal(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Stdin{Stdin: pattern(n)}})
		var frames []int
		for o := 16 << 10; o < len(wire); o += 16 << 10 {
			frames = append(frames, o)
		}
		data := split(wire, frames...)
		b.Run(fmt.Sprintf("proto/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				var m openshellv1.ExecSandboxInput
				if err := pc.Unmarshal(data, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("execcodec/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				var m openshellv1.ExecSandboxInput
				if err := (Codec{}).Unmarshal(data, &m); err != nil {
					b.Fatal(err)
				}
				Release(m.GetStdin())
			}
		})
	}
}
