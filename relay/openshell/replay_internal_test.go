package openshell

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// readN reads exactly n bytes from r in reads of at most step.
func readN(t *testing.T, r io.Reader, n, step int) []byte {
	t.Helper()
	var out []byte
	buf := make([]byte, step)
	for len(out) < n {
		k, err := r.Read(buf[:min(step, n-len(out))])
		out = append(out, buf[:k]...)
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", len(out), n, err)
		}
	}
	return out
}

// chunked gives its chunks one a Read, then err (EOF if nil).
type chunked struct {
	chunks [][]byte
	err    error
	reads  int
}

func (c *chunked) Read(p []byte) (int, error) {
	c.reads++
	if len(c.chunks) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	if len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

func TestReplay(t *testing.T) {
	ctx := context.Background()
	data := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	boom := errors.New("boom")
	for _, tc := range []struct {
		name      string
		limit     int
		firstRead int // what the first attempt reads before it fails
		step      int
		err       error // stdin's error after its data
	}{
		{"FirstReadsNothing", 64, 0, 5, nil},
		{"FirstReadsSome", 64, 10, 5, nil},
		{"FirstReadsAllKept", 64, len(data), 7, nil},
		{"FirstReadsToLimit", 16, 16, 16, nil},
		{"StdinFails", 64, 10, 5, boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &chunked{chunks: [][]byte{data[:12], data[12:20], data[20:]}, err: tc.err}
			s := newReplay(src, tc.limit)
			first := s.reader(ctx)
			if got := readN(t, first, tc.firstRead, tc.step); !bytes.Equal(got, data[:tc.firstRead]) {
				t.Fatalf("first attempt read %q", got)
			}
			if !s.replayable() {
				t.Fatal("not replayable before a commit")
			}

			second := s.reader(ctx)
			s.commit(second)
			if s.replayable() {
				t.Fatal("replayable after a commit")
			}
			got := readN(t, second, len(data), tc.step)
			if !bytes.Equal(got, data) {
				t.Fatalf("second attempt read %q, want all of stdin from its start", got)
			}
			_, err := second.Read(make([]byte, 8))
			want := tc.err
			if want == nil {
				want = io.EOF
			}
			if !errors.Is(err, want) {
				t.Fatalf("at the end: %v, want %v", err, want)
			}
			if _, err := first.Read(make([]byte, 8)); !errors.Is(err, errSuperseded) {
				t.Fatalf("first attempt after the commit: %v, want errSuperseded", err)
			}
			logged, replayed, inherited := s.counts()
			if logged < int64(tc.firstRead) || logged > int64(tc.limit) || replayed != int64(tc.firstRead) || inherited != 0 {
				t.Fatalf("counts %d logged, %d replayed, %d inherited; first attempt read %d", logged, replayed, inherited, tc.firstRead)
			}
			if len(s.kept) != 0 {
				t.Fatalf("%d bytes kept after all was read", len(s.kept))
			}
		})
	}
}

// TestReplayLimit: before the commit a reader gets no more than limit
// bytes and then waits, for the commit or its context.
func TestReplayLimit(t *testing.T) {
	src := bytes.NewReader(bytes.Repeat([]byte("x"), 100))
	s := newReplay(src, 30)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	r := s.reader(ctx)
	n, err := io.ReadFull(r, make([]byte, 100))
	if n != 30 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read %d, %v before the commit; want the 30 bytes kept, then the context's end", n, err)
	}

	r2 := s.reader(context.Background())
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r2)
		done <- b
	}()
	// r2 reads the 30 kept bytes and waits at the limit until the commit.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		waiting := r2.off == 30
		s.mu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second reader never took the kept bytes")
		}
		time.Sleep(time.Millisecond)
	}
	s.commit(r2)
	if b := <-done; len(b) != 100 {
		t.Fatalf("after the commit: %d bytes, want 100", len(b))
	}
	if _, err := src.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatal("stdin not read to its end")
	}
}

// blocking gives one chunk per value sent on feed; closed feed is EOF.
type blocking struct {
	feed    chan []byte
	reading chan struct{}
}

func (b *blocking) Read(p []byte) (int, error) {
	b.reading <- struct{}{}
	d, ok := <-b.feed
	if !ok {
		return 0, io.EOF
	}
	return copy(p, d), nil
}

// TestReplayInherits: a superseded attempt's Read still in flight at the
// commit gives its bytes to the committed attempt, which waits for it
// rather than read stdin alongside it.
func TestReplayInherits(t *testing.T) {
	src := &blocking{feed: make(chan []byte), reading: make(chan struct{}, 4)}
	s := newReplay(src, 64)
	ctx, cancel := context.WithCancel(context.Background())
	first := s.reader(ctx)
	res := make(chan error, 1)
	go func() {
		_, err := first.Read(make([]byte, 32))
		res <- err
	}()
	<-src.reading // the first attempt sits in stdin's Read
	cancel()      // and its attempt ends, as a failed exec's does

	second := s.reader(context.Background())
	s.commit(second)
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(second)
		got <- b
	}()
	src.feed <- []byte("hello")
	if err := <-res; !errors.Is(err, errSuperseded) {
		t.Fatalf("superseded attempt's read: %v, want errSuperseded", err)
	}
	<-src.reading
	src.feed <- []byte(" world")
	<-src.reading
	close(src.feed)
	if b := <-got; string(b) != "hello world" {
		t.Fatalf("committed attempt read %q, want %q", b, "hello world")
	}
	if _, _, inherited := s.counts(); inherited != 5 {
		t.Fatalf("%d bytes inherited, want the 5 the superseded read took", inherited)
	}
}
