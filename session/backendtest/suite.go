package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/session"
)

// Run checks the contract of session.Backend on backends made by
// newBackend, each new and empty.
func Run(t *testing.T, newBackend func(t *testing.T) session.Backend) {
	ctx := context.Background()
	t.Run("PutGetStat", func(t *testing.T) {
		b := newBackend(t)
		data := bytes.Repeat([]byte("ferry "), 1000)
		put(t, b, "a/b/c", data, false)
		if got := get(t, b, "a/b/c"); !bytes.Equal(got, data) {
			t.Fatalf("Get returned %d bytes, want the %d put", len(got), len(data))
		}
		o, err := b.Stat(ctx, "a/b/c")
		if err != nil || o.Size != int64(len(data)) || o.Name != "a/b/c" || time.Since(o.ModTime) > time.Minute {
			t.Fatalf("Stat = %+v, %v", o, err)
		}
		put(t, b, "a/b/c", []byte("new"), false)
		if got := get(t, b, "a/b/c"); string(got) != "new" {
			t.Fatalf("after a second Put, Get = %q", got)
		}
		put(t, b, "empty", nil, false)
		if got := get(t, b, "empty"); len(got) != 0 {
			t.Fatalf("Get of an empty object = %q", got)
		}
	})
	t.Run("Missing", func(t *testing.T) {
		b := newBackend(t)
		if _, err := b.Get(ctx, "no/such"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Get of a missing object: %v, want fs.ErrNotExist", err)
		}
		if _, err := b.Stat(ctx, "no/such"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Stat of a missing object: %v, want fs.ErrNotExist", err)
		}
		if err := b.Delete(ctx, "no/such"); err != nil {
			t.Errorf("Delete of a missing object: %v", err)
		}
	})
	t.Run("Exclusive", func(t *testing.T) {
		b := newBackend(t)
		put(t, b, "k/1", []byte("first"), true)
		err := b.Put(ctx, "k/1", bytes.NewReader([]byte("second")), true)
		if !errors.Is(err, fs.ErrExist) {
			t.Fatalf("second exclusive Put: %v, want fs.ErrExist", err)
		}
		if got := get(t, b, "k/1"); string(got) != "first" {
			t.Fatalf("after a refused exclusive Put, Get = %q", got)
		}
	})
	t.Run("ExclusiveRace", func(t *testing.T) {
		b := newBackend(t)
		const n = 16
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				errs[i] = b.Put(ctx, "race/1", bytes.NewReader(fmt.Appendf(nil, "writer %d", i)), true)
			})
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won >= 0:
				t.Fatalf("writers %d and %d both won", won, i)
			case err == nil:
				won = i
			case !errors.Is(err, fs.ErrExist):
				t.Fatalf("writer %d: %v, want fs.ErrExist", i, err)
			}
		}
		if won < 0 {
			t.Fatal("no writer won")
		}
		if got := get(t, b, "race/1"); string(got) != fmt.Sprintf("writer %d", won) {
			t.Fatalf("object holds %q, the winner was %d", got, won)
		}
	})
	t.Run("FailedReader", func(t *testing.T) {
		b := newBackend(t)
		for _, excl := range []bool{false, true} {
			r := io.MultiReader(bytes.NewReader([]byte("part")), errReader{})
			if err := b.Put(ctx, "f/x", r, excl); err == nil {
				t.Fatalf("Put (exclusive %v) from a failing reader succeeded", excl)
			}
			if _, err := b.Stat(ctx, "f/x"); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("a failed Put (exclusive %v) left an object: %v", excl, err)
			}
		}
		if names := list(t, b, ""); len(names) != 0 {
			t.Fatalf("a failed Put left %q", names)
		}
	})
	t.Run("List", func(t *testing.T) {
		b := newBackend(t)
		all := []string{"chunks/ab/ab01", "chunks/ab/ab02", "chunks/cd/cd01", "snapshots/k1/1", "snapshots/k1/2", "snapshots/k10/1", "top"}
		for _, n := range all {
			put(t, b, n, []byte(n), false)
		}
		for _, tc := range []struct {
			prefix string
			want   []string
		}{
			{"", all},
			{"chunks/", all[:3]},
			{"chunks/a", all[:2]},
			{"snapshots/k1/", all[3:5]},
			{"snapshots/k1", all[3:6]},
			{"nothing/", nil},
			{"to", all[6:]},
		} {
			if got := list(t, b, tc.prefix); !slices.Equal(got, tc.want) {
				t.Errorf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
			}
		}
		stop := errors.New("stop")
		if err := b.List(ctx, "", func(session.ObjectInfo) error { return stop }); err != stop {
			t.Errorf("List returned %v, want fn's error", err)
		}
		if err := b.Delete(ctx, "snapshots/k1/1"); err != nil {
			t.Fatal(err)
		}
		if got := list(t, b, "snapshots/"); !slices.Equal(got, []string{"snapshots/k1/2", "snapshots/k10/1"}) {
			t.Errorf("after Delete, List = %q", got)
		}
	})
	t.Run("BadNames", func(t *testing.T) {
		b := newBackend(t)
		for _, n := range []string{"", "/abs", "../up", "a/../b", "a//b", "a/", "."} {
			if err := b.Put(ctx, n, bytes.NewReader(nil), false); err == nil {
				t.Errorf("Put(%q) succeeded", n)
			}
		}
	})
	t.Run("GetRange", func(t *testing.T) {
		b := newBackend(t)
		rg, ok := b.(session.RangeGetter)
		if !ok {
			t.Skip("the backend has no GetRange (optional)")
		}
		data := make([]byte, 1000)
		for i := range data {
			data[i] = byte(i * 7)
		}
		put(t, b, "packs/r/x", data, false)
		for _, tc := range []struct {
			off, n int64
			want   []byte
		}{
			{0, 10, data[:10]},
			{500, 100, data[500:600]},
			{990, 100, data[990:]}, // cut at the end
			{0, 1000, data},
			{999, 1, data[999:]},
			{7, 0, nil},
		} {
			r, err := rg.GetRange(ctx, "packs/r/x", tc.off, tc.n)
			if err != nil {
				t.Fatalf("GetRange(%d, %d): %v", tc.off, tc.n, err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Errorf("GetRange(%d, %d) = %d bytes, %v; want %d bytes", tc.off, tc.n, len(got), err, len(tc.want))
			}
		}
		if _, err := rg.GetRange(ctx, "no/such", 0, 10); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("GetRange of a missing object: %v, want fs.ErrNotExist", err)
		}
		if _, err := rg.GetRange(ctx, "../up", 0, 10); err == nil {
			t.Error("GetRange of a bad name succeeded")
		}
	})
	t.Run("Canceled", func(t *testing.T) {
		b := newBackend(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := b.Put(cctx, "c/x", bytes.NewReader([]byte("x")), false); !errors.Is(err, context.Canceled) {
			t.Errorf("Put with a canceled context: %v", err)
		}
	})
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("reader broke") }

func put(t *testing.T, b session.Backend, name string, data []byte, excl bool) {
	t.Helper()
	if err := b.Put(context.Background(), name, bytes.NewReader(data), excl); err != nil {
		t.Fatalf("Put(%q): %v", name, err)
	}
}

func get(t *testing.T, b session.Backend, name string) []byte {
	t.Helper()
	r, err := b.Get(context.Background(), name)
	if err != nil {
		t.Fatalf("Get(%q): %v", name, err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("Get(%q): %v", name, err)
	}
	return data
}

func list(t *testing.T, b session.Backend, prefix string) []string {
	t.Helper()
	var names []string
	err := b.List(context.Background(), prefix, func(o session.ObjectInfo) error {
		names = append(names, o.Name)
		return nil
	})
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	slices.Sort(names)
	return names
}
