package gateway

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/internal/execcodec"
)

// received is a stdin message's payload as the server receives it: from
// execcodec's pool.
func received(t *testing.T, data []byte) []byte {
	t.Helper()
	wire, err := proto.Marshal(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Stdin{Stdin: data}})
	if err != nil {
		t.Fatal(err)
	}
	var m openshellv1.ExecSandboxInput
	if err := (execcodec.Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &m); err != nil {
		t.Fatal(err)
	}
	return m.GetStdin()
}

func chunk(i, n int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, n) }

// feed puts payloads of the given sizes and finishes with end. It returns
// the payloads, which the reader releases, what they hold, and a channel
// closed when the receiver is done.
func feed(t *testing.T, s *stdinStream, sizes []int, end error) ([][]byte, []byte, <-chan struct{}) {
	var bufs [][]byte
	var want []byte
	for i, n := range sizes {
		c := chunk(i, n)
		want = append(want, c...)
		bufs = append(bufs, received(t, c))
	}
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		for _, b := range bufs {
			if !s.put(b) {
				return
			}
		}
		s.finish(end)
	}()
	return bufs, want, fed
}

// checkReleased checks that every non-empty payload was released
// (poisoned); execcodec.Debug panics on a second release.
func checkReleased(t *testing.T, bufs [][]byte) {
	t.Helper()
	for i, b := range bufs {
		if len(b) > 0 && b[0] != execcodec.Poison {
			t.Fatalf("payload %d was not released", i)
		}
	}
}

var streamSizes = []int{1, 0, 127, 128, 16384, 256<<10 - 64, 5, 256 << 10}

// TestStdinStreamWriteTo: WriteTo hands each payload, unchanged, to the
// writer and releases it once Write has returned, never before.
func TestStdinStreamWriteTo(t *testing.T) {
	s := newStdinStream([]byte("start:"))
	defer s.close()
	bufs, want, fed := feed(t, s, streamSizes, nil)
	var got bytes.Buffer
	n, err := s.WriteTo(writerFunc(func(p []byte) (int, error) {
		// A premature release would have poisoned p by now.
		if bytes.IndexByte(p, execcodec.Poison) >= 0 {
			t.Errorf("Write got a released payload")
		}
		return got.Write(p)
	}))
	if err != nil || n != int64(len(want))+6 {
		t.Fatalf("WriteTo = %d, %v; want %d, nil", n, err, len(want)+6)
	}
	if !bytes.Equal(got.Bytes(), append([]byte("start:"), want...)) {
		t.Fatal("WriteTo wrote other bytes")
	}
	<-fed
	checkReleased(t, bufs)
}

// TestStdinStreamRead: Read copies out across payload boundaries with small
// buffers, and releases each payload once it has been read in full.
func TestStdinStreamRead(t *testing.T) {
	s := newStdinStream(nil)
	defer s.close()
	bufs, want, fed := feed(t, s, streamSizes, nil)
	var got []byte
	p := make([]byte, 1000)
	for {
		n, err := s.Read(p)
		got = append(got, p[:n]...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatal("Read gave other bytes")
	}
	<-fed
	checkReleased(t, bufs)
}

// TestStdinStreamEndError: the receiver's error ends the stream, for
// Read and WriteTo alike, and stays.
func TestStdinStreamEndError(t *testing.T) {
	boom := errors.New("boom")
	s := newStdinStream(nil)
	defer s.close()
	bufs, want, fed := feed(t, s, []int{10, 20}, boom)
	var got bytes.Buffer
	if n, err := s.WriteTo(&got); !errors.Is(err, boom) || n != 30 {
		t.Fatalf("WriteTo = %d, %v; want 30, boom", n, err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatal("WriteTo wrote other bytes")
	}
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, boom) {
		t.Fatalf("Read after the end = %v", err)
	}
	<-fed
	checkReleased(t, bufs)
}

// TestStdinStreamWriteFails: a failed write releases the payload it was
// given, once, and the failure sticks.
func TestStdinStreamWriteFails(t *testing.T) {
	boom := errors.New("boom")
	s := newStdinStream(nil)
	bufs, _, fed := feed(t, s, []int{10, 20}, nil)
	if _, err := s.WriteTo(writerFunc(func(p []byte) (int, error) { return 3, boom })); !errors.Is(err, boom) {
		t.Fatalf("WriteTo = %v", err)
	}
	if _, err := s.WriteTo(io.Discard); !errors.Is(err, boom) {
		t.Fatalf("second WriteTo = %v", err)
	}
	// The receiver, blocked on its second put, is let go by close, and
	// releases what it held.
	s.close()
	<-fed
	checkReleased(t, bufs)
}

// TestStdinStreamCloseMidWrite: the handler's close while the pump is in
// the middle of a Write (relay.Execer does not wait for the pump) leaves
// the payload being written alone, and the receiver's next put releases
// its own.
func TestStdinStreamCloseMidWrite(t *testing.T) {
	s := newStdinStream(nil)
	bufs, want, fed := feed(t, s, []int{64 << 10, 100}, nil)
	inWrite, closed := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		first := true
		_, err := s.WriteTo(writerFunc(func(p []byte) (int, error) {
			if first {
				first = false
				close(inWrite)
				<-closed
				if !bytes.Equal(p, want[:64<<10]) {
					t.Errorf("the payload being written changed under Write")
				}
			}
			return len(p), nil
		}))
		done <- err
	}()
	<-inWrite
	s.close()
	close(closed)
	err := <-done
	// The second payload went to the writer or back to the pool, but
	// either way it was released once.
	if err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("WriteTo = %v", err)
	}
	<-fed
	checkReleased(t, bufs)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
