package linkemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Shape is one direction of a link.
type Shape struct {
	// BitsPerSecond is the bandwidth; 0 is unlimited.
	BitsPerSecond float64
	// Delay is the one-way propagation delay.
	Delay time.Duration
}

func (s Shape) bytesPerSecond() float64 { return s.BitsPerSecond / 8 }

// Profile is a named symmetric link.
type Profile struct {
	Name string
	Shape
}

// RTT is the profile's round-trip time.
func (p Profile) RTT() time.Duration { return 2 * p.Delay }

// BytesPerSecond is the profile's rate in bytes.
func (p Profile) BytesPerSecond() float64 { return p.bytesPerSecond() }

func (p Profile) String() string {
	return fmt.Sprintf("%s (%g Mbit/s, %v one way)", p.Name, p.BitsPerSecond/1e6, p.Delay)
}

// Profiles are the links ferry's benchmarks run over: a LAN, a cloud
// region away, and another continent.
func Profiles() []Profile {
	return []Profile{
		{"lan", Shape{1e9, 500 * time.Microsecond}},
		{"region", Shape{100e6, 20 * time.Millisecond}},
		{"far", Shape{20e6, 80 * time.Millisecond}},
	}
}

// Lookup returns the profile of Profiles named name.
func Lookup(name string) (Profile, bool) {
	for _, p := range Profiles() {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}

// Config is what Start proxies and how.
type Config struct {
	// Target is the address every accepted connection is proxied to.
	Target string
	// Up shapes the bytes from the client to Target, Down the bytes back.
	Up, Down Shape
}

// ConfigFor is cfg for a symmetric profile p in front of target.
func ConfigFor(target string, p Profile) Config {
	return Config{Target: target, Up: p.Shape, Down: p.Shape}
}

// Stats are a link's counters since Start; subtract two to get one
// command's share.
type Stats struct {
	// Up and Down are the bytes proxied each way.
	Up, Down int64
	// Conns is the connections accepted; each one cost a round trip of
	// TCP handshake before its first byte.
	Conns int64
	// Turns counts, per connection, each time one side sent after both
	// sides had been silent for at least half the round-trip time and the
	// other side's bytes had reached it: one side was waiting for the
	// other. A
	// request and its response are one turn (the response); a
	// conversation of n exchanges is 2n-1 turns. A stream one way with
	// flow-control updates back is none, unless the sender stalls on its
	// window (then two: the update it waited for, and its resumption).
	Turns int64
}

// Sub is s minus o, counter by counter.
func (s Stats) Sub(o Stats) Stats {
	return Stats{Up: s.Up - o.Up, Down: s.Down - o.Down, Conns: s.Conns - o.Conns, Turns: s.Turns - o.Turns}
}

// RoundTrips is the round trips the counted traffic waited for: one per
// connection's handshake, and one per two turns (rounded up).
func (s Stats) RoundTrips() int64 { return s.Conns + (s.Turns+1)/2 }

// Link is a running proxy. Its methods are safe for concurrent use.
type Link struct {
	cfg    Config
	ln     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// The directions' buckets are shared by all connections: they share
	// the link.
	up, down *bucket
	// quiet is how long a side must have been silent for its next send to
	// count as a turn.
	quiet time.Duration

	mu    sync.Mutex
	conns map[net.Conn]struct{}

	upBytes, downBytes, nconns, turns atomic.Int64
	rec                               atomic.Pointer[Recorder]
}

// Start listens on 127.0.0.1 on a free port and proxies to cfg.Target
// until ctx ends or Close.
func Start(ctx context.Context, cfg Config) (*Link, error) {
	if cfg.Target == "" {
		return nil, errors.New("linkemu: no target")
	}
	if cfg.Up.BitsPerSecond < 0 || cfg.Down.BitsPerSecond < 0 || cfg.Up.Delay < 0 || cfg.Down.Delay < 0 {
		return nil, errors.New("linkemu: negative rate or delay")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &Link{cfg: cfg, ln: ln, ctx: ctx, cancel: cancel,
		up: newBucket(cfg.Up), down: newBucket(cfg.Down),
		quiet: (cfg.Up.Delay + cfg.Down.Delay) / 2,
		conns: map[net.Conn]struct{}{}}
	l.wg.Add(2)
	go func() {
		defer l.wg.Done()
		<-ctx.Done()
		ln.Close()
		l.mu.Lock()
		for c := range l.conns {
			c.Close()
		}
		l.mu.Unlock()
	}()
	go l.accept()
	return l, nil
}

// Addr is the proxy's "127.0.0.1:port".
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Stats returns the counters so far.
func (l *Link) Stats() Stats {
	return Stats{Up: l.upBytes.Load(), Down: l.downBytes.Load(), Conns: l.nconns.Load(), Turns: l.turns.Load()}
}

// Record starts a Recorder of the link's traffic, which replaces any
// recording under way.
func (l *Link) Record() *Recorder {
	r := &Recorder{}
	l.rec.Store(r)
	return r
}

// StopRecording ends the recording under way.
func (l *Link) StopRecording() { l.rec.Store(nil) }

// Recorder is a log of the reads a link made, each when its bytes went
// on the line (the bucket lets a burst of a few ms through at once after
// a pause), for telling where a transfer's time went: its setup, its
// first bytes, its body (see Reached).
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

// Event is one read: n bytes sent Up or Down at At.
type Event struct {
	At  time.Time
	Up  bool
	Len int
}

// maxEvents bounds a recording: about 8 GiB of a transfer in 64 KiB
// reads, far more than a benchmark row's.
const maxEvents = 1 << 17

func (r *Recorder) add(at time.Time, dir, n int) {
	r.mu.Lock()
	if len(r.events) < maxEvents {
		r.events = append(r.events, Event{At: at, Up: dir == 0, Len: n})
	}
	r.mu.Unlock()
}

// Events returns what the recorder holds so far, in time order.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	ev := slices.Clone(r.events)
	r.mu.Unlock()
	slices.SortStableFunc(ev, func(a, b Event) int { return a.At.Compare(b.At) })
	return ev
}

// Reached is how long after the first byte either way the bytes sent in
// one direction (up or down) first totalled each of marks; a mark never
// reached is -1.
func (r *Recorder) Reached(up bool, marks ...int64) []time.Duration {
	ev := r.Events()
	out := make([]time.Duration, len(marks))
	for i := range out {
		out[i] = -1
	}
	if len(ev) == 0 {
		return out
	}
	var sum int64
	for _, e := range ev {
		if e.Up != up {
			continue
		}
		sum += int64(e.Len)
		for i, m := range marks {
			if out[i] < 0 && sum >= m {
				out[i] = e.At.Sub(ev[0].At)
			}
		}
	}
	return out
}

// Close stops the proxy, cuts every connection and returns once every
// goroutine it started has returned.
func (l *Link) Close() error {
	l.cancel()
	l.wg.Wait()
	return nil
}

// track adds c to the connections Close cuts; false once the link is
// closing (c is then closed).
func (l *Link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		c.Close()
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *Link) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	c.Close()
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return // closed; a loopback listener has no transient errors worth a retry loop
		}
		if !l.track(c) {
			return
		}
		l.nconns.Add(1)
		l.wg.Add(1)
		go l.serve(c, time.Now())
	}
}

// serve proxies one accepted connection.
func (l *Link) serve(client net.Conn, accepted time.Time) {
	defer l.wg.Done()
	defer l.untrack(client)
	var d net.Dialer
	server, err := d.DialContext(l.ctx, "tcp", l.cfg.Target)
	if err != nil {
		return
	}
	if !l.track(server) {
		return
	}
	defer l.untrack(server)
	// The handshake: the client's connect returns after a round trip, so
	// its first byte leaves no sooner; the server accepts after a one-way
	// delay, and its first byte (a banner) leaves then.
	c := &conn{quiet: l.quiet}
	abort := func() { client.Close(); server.Close() }
	var wg sync.WaitGroup
	for dir, p := range []struct {
		src, dst net.Conn
		b        *bucket
		shape    Shape
		from     time.Time
		count    *atomic.Int64
	}{
		{client, server, l.up, l.cfg.Up, accepted.Add(l.cfg.Up.Delay + l.cfg.Down.Delay), &l.upBytes},
		{server, client, l.down, l.cfg.Down, accepted.Add(l.cfg.Up.Delay), &l.downBytes},
	} {
		q := make(chan chunk, queueLen)
		wg.Add(2)
		go func() {
			defer wg.Done()
			defer close(q)
			l.read(c, dir, p.src, p.b, p.shape, p.from, p.count, q)
		}()
		go func() {
			defer wg.Done()
			l.write(c, dir, p.dst, q, abort)
		}()
	}
	wg.Wait()
}

// paceSlack is how far a direction's sender may run ahead of the line
// before its reader waits for it.
const paceSlack = time.Millisecond

// queueLen bounds the chunks in flight one way: far more than a
// bandwidth-delay product of the profiles in full chunks, so that only
// floods of tiny writes meet it.
const queueLen = 4096

// chunk is bytes in flight, or the end of a direction (nil data).
type chunk struct {
	data    []byte
	arrival time.Time
}

// read moves src's bytes into q, each chunk once the bucket lets it out
// (and no sooner than from), stamped with its arrival time.
func (l *Link) read(c *conn, dir int, src net.Conn, b *bucket, s Shape, from time.Time, count *atomic.Int64, q chan<- chunk) {
	buf := make([]byte, b.chunk)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			now := time.Now()
			if c.sent(dir, now) {
				l.turns.Add(1)
			}
			if now.Before(from) {
				if !sleepUntil(l.ctx, from) {
					return
				}
				now = from
			}
			dep := b.take(now, n)
			// The reader waits for the line only once it is paceSlack
			// ahead of it, as a NIC's queue takes a burst: a wait per
			// small read would cost a timer's latency each (tens of µs
			// to a ms on a busy machine), far more than its line time
			// on a fast link, and 10,000 small files would measure the
			// timers. The chunk's arrival is its line time either way.
			if dep.Sub(now) > paceSlack && !sleepUntil(l.ctx, dep) {
				return
			}
			// Recorded before counted: whoever sees the count sees the
			// read in a recording under way.
			if r := l.rec.Load(); r != nil {
				r.add(maxTime(dep, now), dir, n)
			}
			count.Add(int64(n))
			at := maxTime(dep, now).Add(s.Delay)
			select {
			case q <- chunk{data: append([]byte(nil), buf[:n]...), arrival: at}:
			case <-l.ctx.Done():
				return
			}
		}
		if err != nil {
			// EOF or a cut: either way the other side sees the end once
			// the bytes before it have arrived.
			at := maxTime(time.Now(), from).Add(s.Delay)
			select {
			case q <- chunk{arrival: at}:
			case <-l.ctx.Done():
			}
			return
		}
	}
}

// write delivers q's chunks to dst at their arrival times, and half-closes
// dst at the end. A failed write aborts the connection and drains q.
func (l *Link) write(c *conn, dir int, dst net.Conn, q <-chan chunk, abort func()) {
	failed := false
	for ch := range q {
		if failed {
			continue
		}
		if !sleepUntil(l.ctx, ch.arrival) {
			failed = true
			continue
		}
		if ch.data == nil {
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			continue
		}
		// Before the write: the receiver may answer before Write returns.
		c.delivered(dir, time.Now())
		if _, err := dst.Write(ch.data); err != nil {
			failed = true
			abort()
		}
	}
}

// conn is one connection's turn detector.
type conn struct {
	quiet         time.Duration
	mu            sync.Mutex
	lastSent      [2]time.Time // by direction: the side sending that way read last
	lastDelivered [2]time.Time // by direction: the last byte written to that direction's receiver
}

// sent records that the side sending in direction dir sent at now, and
// reports whether that is a turn: the other side's bytes reached it since
// it last sent, and both sides had been quiet long enough for this one to
// be answering and the other to be waiting. A receiver's flow-control
// updates to a sender still streaming are no turn: the sender is not
// quiet.
func (c *conn) sent(dir int, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	last, other := c.lastSent[dir], c.lastSent[1-dir]
	c.lastSent[dir] = now
	answered := c.lastDelivered[1-dir].After(last)
	return answered && (last.IsZero() || now.Sub(last) >= c.quiet) && now.Sub(other) >= c.quiet
}

func (c *conn) delivered(dir int, now time.Time) {
	c.mu.Lock()
	c.lastDelivered[dir] = now
	c.mu.Unlock()
}

// bucket is one direction's token bucket, kept as a virtual clock: free
// is when the link has sent everything taken so far. It may lag now by
// up to depth, the burst that makes up for a sleeper's late wake-ups.
type bucket struct {
	rate  float64 // bytes per second; 0 unlimited
	depth time.Duration
	chunk int // bytes read at a time

	mu   sync.Mutex
	free time.Time
}

func newBucket(s Shape) *bucket {
	b := &bucket{rate: s.bytesPerSecond(), depth: 5 * time.Millisecond, chunk: 64 << 10}
	if b.rate > 0 {
		// About a millisecond of the link per read, so that a chunk's
		// serialization is short next to the delays of the profiles.
		b.chunk = min(max(int(b.rate/1000), 4<<10), 64<<10)
	}
	return b
}

// take charges n bytes sent at now and returns when their last byte has
// left.
func (b *bucket) take(now time.Time, n int) time.Time {
	if b.rate == 0 {
		return now
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if floor := now.Add(-b.depth); b.free.Before(floor) {
		b.free = floor
	}
	b.free = b.free.Add(time.Duration(float64(n) / b.rate * float64(time.Second)))
	return b.free
}

// sleepUntil waits until t or ctx's end, and reports whether t came.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
