package openshell

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
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

// randomChunks gives data in reads of random sizes (some empty).
type randomChunks struct {
	data []byte
	rng  *rand.Rand
}

func (r *randomChunks) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.data), r.rng.IntN(700))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// TestReplayRandom drives replay through random attempts: each reads a
// random part of stdin in random steps (stopping, as a failed attempt
// does, at the limit before a commit), until one commits and reads to the
// end. Every attempt must read exactly stdin from its start, and the
// committed one all of it.
func TestReplayRandom(t *testing.T) {
	stopped, cancel := context.WithCancel(context.Background())
	cancel() // a wait at the limit ends at once, as the attempt's end
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		data := make([]byte, rng.IntN(5000))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		limit := 1 + rng.IntN(3000)
		s := newReplay(&randomChunks{data: data, rng: rng}, limit)
		var prev []*replayReader
		for attempt := 0; ; attempt++ {
			r := s.reader(stopped)
			final := attempt == 4 || rng.IntN(3) == 0
			if final && rng.IntN(2) == 0 {
				s.commit(r) // one-shot: commits before it reads
			}
			var got []byte
			buf := make([]byte, 1+rng.IntN(900))
			want := len(data)
			if !final {
				want = rng.IntN(len(data) + 1)
			}
			for len(got) < want {
				n, err := r.Read(buf[:min(len(buf), 1+rng.IntN(len(buf)))])
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if errors.Is(err, context.Canceled) && s.owner == nil {
					if final {
						s.commit(r) // the headers came: the reads go on
						continue
					}
					break // the limit: this attempt fails here
				}
				if err != nil {
					t.Fatalf("seed %d attempt %d: %v", seed, attempt, err)
				}
			}
			if !bytes.Equal(got, data[:len(got)]) {
				t.Fatalf("seed %d attempt %d: read %d bytes that are not stdin's first", seed, attempt, len(got))
			}
			if final {
				s.commit(r) // the headers, if they have not come yet
				if len(got) != len(data) {
					t.Fatalf("seed %d attempt %d: committed attempt read %d of %d bytes", seed, attempt, len(got), len(data))
				}
				for _, p := range prev {
					if _, err := p.Read(buf); !errors.Is(err, errSuperseded) {
						t.Fatalf("seed %d: an earlier attempt read on after the commit: %v", seed, err)
					}
				}
				if len(s.kept) > 0 {
					t.Fatalf("seed %d: %d bytes still kept at the end", seed, len(s.kept))
				}
				break
			}
			prev = append(prev, r)
		}
	}
}
