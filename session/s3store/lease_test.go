package s3store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/backendtest"
	"github.com/ferry-dev/ferry/session/s3store/s3test"
)

// Test timings of the lease: short, with room for a loaded machine under
// -race (a holder that takes over half of leaseSettle retries, which is
// slower but still correct).
const (
	testSettle = 300 * time.Millisecond
	testTTL    = 2 * time.Second
)

var prefixes atomic.Int64

// leaseConfig is a Config on srv's bucket and prefix with the lease
// forced, as on a server without conditional writes.
func leaseConfig(srv *s3test.Server, prefix string) Config {
	return Config{
		Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: prefix, Region: srv.Region,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
		Commit: CommitLease, LeaseSettle: testSettle, LeaseTTL: testTTL,
	}
}

func openLease(t *testing.T, srv *s3test.Server, prefix string) *Backend {
	t.Helper()
	b, err := New(context.Background(), leaseConfig(srv, prefix))
	if err != nil {
		t.Fatal(err)
	}
	if b.ConditionalWrites() {
		t.Fatal("CommitLease: the backend uses conditional writes")
	}
	return b
}

// TestLeaseConformance runs the backend suite with every exclusive Put
// made under the lease (its ExclusiveRace: 16 writers, one name).
func TestLeaseConformance(t *testing.T) {
	srv := s3test.Start(t)
	backendtest.Run(t, func(t *testing.T) session.Backend {
		return openLease(t, srv, fmt.Sprintf("lease/%d", prefixes.Add(1)))
	})
}

// TestLeaseCommitRace has 6 Stores, each on a Backend of its own (as
// many nodes) on one prefix with the lease forced, save one key at once,
// round after round. Every round each store starts from the snapshot the
// previous round committed, so all commit the same sequence number:
// exactly one wins and every other gets the store's conflict error,
// naming the key and the sequence.
func TestLeaseCommitRace(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	const n, key = 6, "race-key"
	stores := make([]*session.Store, n)
	for i := range stores {
		st, err := session.New(session.Config{Backend: openLease(t, srv, "commit-race")})
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = st
	}
	for round := int64(1); round <= 3; round++ {
		var wg sync.WaitGroup
		// Every Scan waits at the barrier, after its Save has read the
		// newest sequence number and before it commits.
		scanned := newBarrier(n)
		errs := make([]error, n)
		seqs := make([]int64, n)
		for i, st := range stores {
			wg.Go(func() {
				src := barrierSource{data: fmt.Sprintf("round %d node %d", round, i), wait: scanned}
				m, err := st.Save(ctx, key, src)
				errs[i] = err
				if m != nil {
					seqs[i] = m.Seq
				}
			})
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			var ce *session.ConflictError
			switch {
			case err == nil && won >= 0:
				t.Fatalf("round %d: stores %d and %d both committed", round, won, i)
			case err == nil:
				won = i
				if seqs[i] != round {
					t.Fatalf("round %d: the winner committed snapshot %d", round, seqs[i])
				}
			case !errors.As(err, &ce) || !errors.Is(err, session.ErrConflict):
				t.Fatalf("round %d: store %d: %v, want a *session.ConflictError", round, i, err)
			case ce.Key != key || ce.Seq != round || !strings.Contains(err.Error(), key):
				t.Fatalf("round %d: store %d: conflict %+v (%q), want key %s snapshot %d named", round, i, ce, err, key, round)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: no store committed", round)
		}
		m, err := stores[0].Load(ctx, key, round)
		if err != nil {
			t.Fatal(err)
		}
		if m.Files != 1 || m.Bytes != int64(len(fmt.Sprintf("round %d node %d", round, won))) {
			t.Fatalf("round %d: snapshot holds %d files of %d bytes, not the winner's", round, m.Files, m.Bytes)
		}
	}
	// Every lease was released, and none is listed.
	b := openLease(t, srv, "commit-race")
	if _, err := b.client.StatObject(ctx, b.bucket, b.key("snapshots/"+key+"/"+leaseMark), minio.StatObjectOptions{}); !isMissing(err) {
		t.Errorf("the lease is still there after the commits: %v", err)
	}
	b.List(ctx, "", func(o session.ObjectInfo) error {
		if strings.Contains(o.Name, leaseMark) {
			t.Errorf("List shows the lease %s", o.Name)
		}
		return nil
	})
}

// barrierSource is a one-file Source whose Scan waits until every
// source of its round has started scanning.
type barrierSource struct {
	data string
	wait *barrier
}

func (s barrierSource) Scan(ctx context.Context, _ *session.Parent, sink session.Sink) error {
	if err := s.wait.arrive(ctx, time.Minute); err != nil {
		return err
	}
	id, err := sink.Put(ctx, []byte(s.data))
	if err != nil {
		return err
	}
	return sink.Add(session.Entry{Path: "f", Kind: session.KindFile, Mode: 0o600, Size: int64(len(s.data)),
		Chunks: []session.ChunkRef{{ID: id, Size: int64(len(s.data))}}})
}

// TestLeaseExpiry: a lease its holder never released (a crashed node)
// blocks a commit until it expires, by its stated expiry or, if that is
// far ahead (a clock that runs fast), after LeaseTTL of watching it.
func TestLeaseExpiry(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	b := openLease(t, srv, "expiry")
	for _, tc := range []struct {
		name     string
		expires  time.Duration // from now
		min, max time.Duration // the commit's time
	}{
		{"stated expiry passed", -time.Minute, 0, testTTL},
		{"stated expiry far ahead", time.Hour, testTTL, 4 * testTTL},
		{"stated expiry in a second", time.Second, time.Second, testTTL + testSettle*4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "snapshots/" + strings.ReplaceAll(tc.name, " ", "-") + "/1"
			stale, err := json.Marshal(lease{Owner: "crashed-node", Expires: time.Now().Add(tc.expires)})
			if err != nil {
				t.Fatal(err)
			}
			lk := b.key(leaseName(name))
			if err := b.putObject(ctx, lk, bytes.NewReader(stale), int64(len(stale)), false); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := b.Put(ctx, name, strings.NewReader("mine"), true); err != nil {
				t.Fatalf("exclusive Put under a stale lease: %v", err)
			}
			took := time.Since(start)
			if took < tc.min || took > tc.max {
				t.Errorf("the commit took %v, want %v to %v", took, tc.min, tc.max)
			}
			if err := b.Put(ctx, name, strings.NewReader("again"), true); !errors.Is(err, fs.ErrExist) {
				t.Errorf("second exclusive Put: %v, want fs.ErrExist", err)
			}
			if cur, err := b.readLease(ctx, lk); err != nil || cur != nil {
				t.Errorf("after the commit the lease is %+v, %v; want it released", cur, err)
			}
		})
	}
}

// TestLeaseHeld: a live holder's lease is not taken: a commit waits
// while another attempt holds the lease, and then, finding the name
// created, fails with fs.ErrExist.
func TestLeaseHeld(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	b := openLease(t, srv, "held")
	const name = "snapshots/k/1"
	live, err := json.Marshal(lease{Owner: "holder", Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	lk := b.key(leaseName(name))
	if err := b.putObject(ctx, lk, bytes.NewReader(live), int64(len(live)), false); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Put(ctx, name, strings.NewReader("waiter"), true) }()
	time.Sleep(testTTL / 2)
	select {
	case err := <-done:
		t.Fatalf("the exclusive Put did not wait for the held lease: %v", err)
	default:
	}
	// The holder commits and releases.
	if err := b.putObject(ctx, b.key(name), strings.NewReader("holder"), 6, false); err != nil {
		t.Fatal(err)
	}
	if err := b.client.RemoveObject(ctx, b.bucket, lk, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, fs.ErrExist) {
			t.Fatalf("the waiter's Put: %v, want fs.ErrExist", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the waiter did not return")
	}
	r, err := b.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, _ := io.ReadAll(r); string(got) != "holder" {
		t.Fatalf("the object holds %q, want the holder's", got)
	}
}

// barrier releases its callers once n have arrived.
type barrier struct {
	mu   sync.Mutex
	n    int
	open chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, open: make(chan struct{})} }

func (b *barrier) arrive(ctx context.Context, max time.Duration) error {
	b.mu.Lock()
	if b.n--; b.n == 0 {
		close(b.open)
	}
	b.mu.Unlock()
	select {
	case <-b.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(max):
		return errors.New("barrier: the others did not arrive")
	}
}
