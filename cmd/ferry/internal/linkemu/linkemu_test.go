package linkemu

import (
	"context"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// serveOnce accepts one connection on a fresh listener and runs h on it in
// a goroutine the test waits for.
func serveOnce(t *testing.T, h func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		h(c)
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func startLink(t *testing.T, target string, p Profile) *Link {
	t.Helper()
	l, err := Start(context.Background(), ConfigFor(target, p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// dial connects to l; the test's cleanup closes the connection.
func dial(t *testing.T, l *Link) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// near reports whether got is want within tol.
func near(got, want, tol float64) bool { return got >= want*(1-tol) && got <= want*(1+tol) }

func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if !near(got, want, tol) {
		t.Errorf("%s = %.4g, want %.4g ± %.0f%%", what, got, want, 100*tol)
	} else {
		t.Logf("%s = %.4g (want %.4g)", what, got, want)
	}
}

// TestRTT: a ping-pong of one byte through far takes its round-trip time,
// each exchange is one round trip and two turns but the first, and the
// first byte back waits for the handshake's round trip too.
func TestRTT(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	p, _ := Lookup("far")
	const n = 8
	// One ping-pong; the loop below takes up to 3, as a loaded machine's
	// late timers only ever add to a time.
	measure := func() (first, median, slowest float64, st Stats) {
		addr := serveOnce(t, func(c net.Conn) { io.Copy(c, c) })
		l := startLink(t, addr, p)
		c := dial(t, l)
		start := time.Now()
		var rtts []float64
		b := []byte{1}
		for i := range n {
			t0 := time.Now()
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, b); err != nil {
				t.Fatal(err)
			}
			if i > 0 {
				rtts = append(rtts, time.Since(t0).Seconds())
			} else {
				first = time.Since(start).Seconds()
			}
		}
		c.Close()
		slices.Sort(rtts)
		st = l.Stats()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return first, rtts[len(rtts)/2], rtts[len(rtts)-1], st
	}
	rtt := p.RTT().Seconds()
	var first, median, slowest float64
	var st Stats
	for range 3 {
		if first, median, slowest, st = measure(); near(first, 2*rtt, 0.05) && near(median, rtt, 0.05) && near(slowest, rtt, 0.05) {
			break
		}
	}
	within(t, "first exchange, handshake included (s)", first, 2*rtt, 0.05)
	within(t, "median RTT (s)", median, rtt, 0.05)
	within(t, "slowest RTT (s)", slowest, rtt, 0.05)
	if st.Up != n || st.Down != n || st.Conns != 1 || st.Turns != 2*n-1 || st.RoundTrips() != 1+n {
		t.Errorf("stats %+v, round trips %d; want %d bytes each way, 1 conn, %d turns, %d round trips", st, st.RoundTrips(), n, 2*n-1, 1+n)
	}
}

// TestRate: 4 MB one way through far arrive at its 20 Mbit/s, with a
// bandwidth-delay product in flight (stop-and-wait over 160 ms would take
// minutes), and cost no turns.
func TestRate(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	p, _ := Lookup("far")
	const size = 4 << 20
	type span struct {
		first, last time.Time
		n           int64
	}
	// One transfer; the loop below takes up to 3, as a loaded machine's
	// late timers only ever add to a time.
	measure := func() (rate, first float64, st Stats) {
		got := make(chan span, 1)
		addr := serveOnce(t, func(c net.Conn) {
			var s span
			buf := make([]byte, 64<<10)
			for {
				m, err := c.Read(buf)
				if m > 0 {
					if s.n == 0 {
						s.first = time.Now()
					}
					s.n += int64(m)
					s.last = time.Now()
				}
				if err != nil {
					break
				}
			}
			got <- s
		})
		l := startLink(t, addr, p)
		c := dial(t, l)
		start := time.Now()
		if _, err := c.Write(make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		c.Close()
		s := <-got
		if s.n != size {
			t.Fatalf("received %d bytes, want %d", s.n, size)
		}
		return float64(s.n) / s.last.Sub(s.first).Seconds(), s.first.Sub(start).Seconds(), l.Stats()
	}
	// The first chunk arrives after the handshake, a one-way delay and its
	// own serialization; from there on the bytes come at the rate.
	wantRate, wantFirst := p.BytesPerSecond(), (p.RTT() + p.Delay).Seconds()
	var rate, first float64
	var st Stats
	for range 3 {
		if rate, first, st = measure(); near(rate, wantRate, 0.05) && near(first, wantFirst, 0.05) {
			break
		}
	}
	within(t, "rate (bytes/s)", rate, wantRate, 0.05)
	within(t, "first byte (s)", first, wantFirst, 0.05)
	if st.Up != size || st.Down != 0 || st.Turns != 0 {
		t.Errorf("stats %+v, want %d bytes up, none down, no turns", st, size)
	}
}

// TestCloseCuts: Close ends a connection in the middle of a transfer and
// leaves no goroutine behind.
func TestCloseCuts(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	p, _ := Lookup("far")
	addr := serveOnce(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	l := startLink(t, addr, p)
	c := dial(t, l)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, 64<<20))
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	l.Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("64 MiB written through a closed link at 20 Mbit/s")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a write through a closed link still blocks")
	}
}

// TestStreamAcks: a stream one way with a small answer back for every
// 256 KiB (as flow-control updates go) is one turn, the last answer,
// which the sender waits for once it has sent everything; the others it
// never waits for.
func TestStreamAcks(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	p, _ := Lookup("far")
	const size, every = 2 << 20, 256 << 10
	addr := serveOnce(t, func(c net.Conn) {
		buf := make([]byte, every)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			c.Write([]byte{1})
		}
	})
	l := startLink(t, addr, p)
	c := dial(t, l)
	if _, err := c.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, size/every)); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Up != size || st.Down != size/every || st.Turns != 1 {
		t.Errorf("stats %+v, want %d up, %d down, one turn", st, size, size/every)
	}
}

// TestRecorder: a recording holds every read each way, in time order,
// with the bytes of each; Reached finds when a direction's total passed a
// mark, and -1 for one it never did; nothing is added once it stops.
func TestRecorder(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	const up, down = 1 << 20, 4 << 10
	addr := serveOnce(t, func(c net.Conn) {
		if _, err := io.CopyN(io.Discard, c, up); err != nil {
			return
		}
		c.Write(make([]byte, down))
		io.Copy(io.Discard, c)
	})
	p, _ := Lookup("lan")
	l := startLink(t, addr, p)
	rec := l.Record()
	c := dial(t, l)
	if _, err := c.Write(make([]byte, up)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, down)); err != nil {
		t.Fatal(err)
	}
	l.StopRecording()
	ev := rec.Events()
	var sums [2]int
	for i, e := range ev {
		if i > 0 && e.At.Before(ev[i-1].At) {
			t.Fatalf("event %d at %v, before the one before it", i, e.At)
		}
		if e.Up {
			sums[0] += e.Len
		} else {
			sums[1] += e.Len
		}
	}
	if sums != [2]int{up, down} || !ev[0].Up || ev[len(ev)-1].Up {
		t.Fatalf("recorded %d bytes up and %d down in %d reads (first up %v, last up %v), want %d and %d", sums[0], sums[1], len(ev), ev[0].Up, ev[len(ev)-1].Up, up, down)
	}
	got := rec.Reached(true, 1, up/2, up, up+1)
	if got[0] != 0 || got[1] <= 0 || got[2] < got[1] || got[3] != -1 {
		t.Errorf("Reached up = %v, want 0, then growing, then -1", got)
	}
	if d := rec.Reached(false, down); d[0] < got[2] {
		t.Errorf("the answer came %v after the first byte, before the request was all sent (%v)", d[0], got[2])
	}
	// More bytes after the stop: counted by the link, not recorded.
	const more = 64 << 10
	if _, err := c.Write(make([]byte, more)); err != nil {
		t.Fatal(err)
	}
	for i := 0; l.Stats().Up < up+more; i++ {
		if i == 5000 {
			t.Fatalf("stats %+v: the bytes after the stop not through in 5 s", l.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if n := len(rec.Events()); n != len(ev) {
		t.Errorf("%d events after StopRecording and %d more bytes, had %d", n, more, len(ev))
	}
}
