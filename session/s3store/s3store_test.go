package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/backendtest"
	"github.com/ferry-dev/ferry/session/s3store"
	"github.com/ferry-dev/ferry/session/s3store/s3test"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// open returns a Backend on a fresh prefix of srv's bucket.
func open(t *testing.T, srv *s3test.Server) *s3store.Backend {
	t.Helper()
	b, err := s3store.New(context.Background(), config(srv, fmt.Sprintf("t/%d", seq.Add(1))))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var seq atomic.Int64

func config(srv *s3test.Server, prefix string) s3store.Config {
	return s3store.Config{
		Endpoint:        srv.Endpoint,
		Bucket:          srv.Bucket,
		Prefix:          prefix,
		Region:          srv.Region,
		AccessKeyID:     srv.AccessKey,
		SecretAccessKey: srv.SecretKey,
	}
}

// TestVersitygw runs the conformance suite against versitygw, which
// honours If-None-Match: * (the probe must say so, or the exclusive
// cases cannot pass).
func TestVersitygw(t *testing.T) {
	srv := s3test.Start(t)
	if b := open(t, srv); !b.ConditionalWrites() {
		t.Fatal("versitygw does not honour If-None-Match: * by the probe")
	}
	backendtest.Run(t, func(t *testing.T) session.Backend { return open(t, srv) })
}

// TestPrefixes checks that backends on different prefixes of one bucket
// do not see each other's objects, and that the probe leaves nothing.
func TestPrefixes(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	a, err := s3store.New(ctx, config(srv, "a"))
	if err != nil {
		t.Fatal(err)
	}
	ab, err := s3store.New(ctx, config(srv, "a/b/"))
	if err != nil {
		t.Fatal(err)
	}
	root, err := s3store.New(ctx, config(srv, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := ab.Put(ctx, "x", bytes.NewReader([]byte("x")), false); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		b    *s3store.Backend
		want string
	}{{a, "b/x"}, {ab, "x"}, {root, "a/b/x"}} {
		var names []string
		if err := tc.b.List(ctx, "", func(o session.ObjectInfo) error { names = append(names, o.Name); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(names) != 1 || names[0] != tc.want {
			t.Errorf("List = %q, want [%q]", names, tc.want)
		}
	}
	if _, err := a.Stat(ctx, "x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat of another prefix's object: %v, want fs.ErrNotExist", err)
	}
}

// TestConditionalRace has 16 Backends (as many nodes) create one name
// at once; exactly one wins and the others get fs.ErrExist.
func TestConditionalRace(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	const n = 16
	bs := make([]*s3store.Backend, n)
	for i := range bs {
		b, err := s3store.New(ctx, config(srv, "race"))
		if err != nil {
			t.Fatal(err)
		}
		bs[i] = b
	}
	for round := range 5 {
		name := fmt.Sprintf("snapshots/k/%d", round)
		var wg sync.WaitGroup
		errs := make([]error, n)
		start := make(chan struct{})
		for i, b := range bs {
			wg.Go(func() {
				<-start
				errs[i] = b.Put(ctx, name, bytes.NewReader(fmt.Appendf(nil, "node %d", i)), true)
			})
		}
		close(start)
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won >= 0:
				t.Fatalf("round %d: nodes %d and %d both won", round, won, i)
			case err == nil:
				won = i
			case !errors.Is(err, fs.ErrExist):
				t.Fatalf("round %d: node %d: %v, want fs.ErrExist", round, i, err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: no node won", round)
		}
	}
}

func TestStoreRoundTrip(t *testing.T) {
	srv := s3test.Start(t)
	for _, pack := range []bool{false, true} {
		t.Run(fmt.Sprintf("pack=%v", pack), func(t *testing.T) { testStoreRoundTrip(t, srv, pack) })
	}
}

func testStoreRoundTrip(t *testing.T, srv *s3test.Server, pack bool) {
	ctx := context.Background()
	s, err := session.New(session.Config{Backend: open(t, srv), Pack: pack})
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	tree := transfertest.RandomTree(t, src, 7, transfertest.TreeOptions{Entries: 120, BigFiles: 1, BigFileSize: 1 << 20})
	m, err := s.Save(ctx, "s3-roundtrip", session.DirSource{Dir: src, ReuseUnchanged: true})
	if err != nil {
		t.Fatal(err)
	}
	if m.Seq != 1 || m.Files != tree.Files || m.Bytes != tree.Bytes {
		t.Fatalf("manifest says seq %d, %d files, %d bytes; tree has %+v", m.Seq, m.Files, m.Bytes, tree)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	if _, err := s.Restore(ctx, "s3-roundtrip", dst, session.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	transfertest.EqualTrees(t, src, dst)
	if err := os.WriteFile(filepath.Join(src, "added"), []byte("more"), 0o600); err != nil {
		t.Fatal(err)
	}
	m2, err := s.Save(ctx, "s3-roundtrip", session.DirSource{Dir: src, ReuseUnchanged: true})
	if err != nil {
		t.Fatal(err)
	}
	if m2.Seq != 2 || m2.NewBytes >= m.Bytes/10 {
		t.Errorf("second save: seq %d, %d new bytes of %d", m2.Seq, m2.NewBytes, m2.Bytes)
	}
	if rep, err := s.Verify(ctx, ""); err != nil || !rep.OK() || (pack && rep.Packs == 0) {
		t.Errorf("verify: %+v, %v", rep, err)
	}
}

// TestNew checks the refusals of New that need no server.
func TestNew(t *testing.T) {
	ctx := context.Background()
	for _, c := range []s3store.Config{
		{},
		{Bucket: "b"},
		{Bucket: "b", AccessKeyID: "k", SecretAccessKey: "s", Endpoint: "ftp://h"},
		{Bucket: "b", AccessKeyID: "k", SecretAccessKey: "s", Endpoint: "http://h/path"},
		{Bucket: "b", AccessKeyID: "k", SecretAccessKey: "s", Endpoint: "http://127.0.0.1:1", Prefix: "../up"},
	} {
		if _, err := s3store.New(ctx, c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
}
