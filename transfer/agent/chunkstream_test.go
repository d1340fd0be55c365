package agent_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// TestChunkStreamEarly: a stream started before the call, and encoded
// whole before the call begins (as on a slow link's setup), restores the
// same tree; a stream left unused, or stopped while it waits for its
// reader or for a chunk, ends when closed (goleak checks in TestMain).
func TestChunkStreamEarly(t *testing.T) {
	st := chunkStore{}
	var lines strings.Builder
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 {
		fmt.Fprintf(&lines, `{"n":%d,"id":"%016x"}`+"\n", i, rng.Uint64())
	}
	a, b := st.add(lines.String()), st.add("b\n")
	mt := time.Unix(1700000000, 0)
	entries := []agent.RestoreEntry{{Path: ".", Kind: archive.Dir, Mode: 0o700, MTime: mt}, file("f", 0o600, mt, a, b, a)}

	t.Run("used", func(t *testing.T) {
		c, ws := inProcess(t)
		chunk, reads := counted(st)
		cs := agent.StartChunkStream(context.Background(), entries, chunk)
		defer cs.Close()
		// Every chunk read before the call: the encoding ran ahead.
		for i := 0; reads.Load() < 3; i++ {
			if i > 500 {
				t.Fatalf("the stream read %d of 3 chunks in 5 s", reads.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
		never := func(context.Context, [32]byte, []byte) ([]byte, error) {
			return nil, errors.New("the restore read a chunk itself")
		}
		res, err := c.Restore(context.Background(), agent.RestoreSpec{Dest: "out", Place: archive.PlaceNew, Stream: true, Encoded: cs}, entries, never)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(ws, "out", "f"))
		if want := lines.String() + "b\n" + lines.String(); err != nil || string(got) != want {
			t.Fatalf("f: %d bytes, %v", len(got), err)
		}
		if res.Bytes != int64(len(got)) || reads.Load() != 3 {
			t.Errorf("result %+v after %d reads; want %d bytes from 3", res, reads.Load(), len(got))
		}
	})
	t.Run("other-entries", func(t *testing.T) {
		c, ws := inProcess(t)
		cs := agent.StartChunkStream(context.Background(), entries[:1], st.get)
		defer cs.Close()
		_, err := c.Restore(context.Background(), agent.RestoreSpec{Dest: "out", Place: archive.PlaceNew, Stream: true, Encoded: cs}, entries, st.get)
		if err == nil || !strings.Contains(err.Error(), "other entries") {
			t.Fatalf("err = %v, want a refusal of a stream of other entries", err)
		}
		if _, err := os.Lstat(filepath.Join(ws, "out")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("out: %v, want nothing written", err)
		}
	})
	t.Run("unread", func(t *testing.T) {
		// 25 MiB that does not compress, far more than the stream holds
		// ahead (8 MiB): it stops reading until a reader comes.
		big := make([]agent.RestoreEntry, 0, 400)
		noise := make([]byte, 64<<10)
		for i := range 400 {
			for j := range noise {
				noise[j] = byte(rng.Uint32())
			}
			big = append(big, file(fmt.Sprintf("f%d", i), 0o600, mt, st.add(string(noise))))
		}
		chunk, reads := counted(st)
		cs := agent.StartChunkStream(context.Background(), big, chunk)
		defer cs.Close()
		for i, last, still := 0, int32(-1), 0; still < 30; i++ {
			if i > 1000 {
				t.Fatalf("the stream still read on after 10 s (%d chunks)", reads.Load())
			}
			time.Sleep(10 * time.Millisecond)
			if n := reads.Load(); n == last {
				still++
			} else {
				last, still = n, 0
			}
		}
		if n := reads.Load(); n < 100 || n > 200 {
			t.Fatalf("the stream read %d chunks of 64 KiB unread; want about 8 MiB's (128)", n)
		}
	})
	t.Run("waiting-for-a-chunk", func(t *testing.T) {
		started := make(chan struct{})
		chunk := func(ctx context.Context, _ [32]byte, _ []byte) ([]byte, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		}
		cs := agent.StartChunkStream(context.Background(), entries, chunk)
		<-started
		cs.Close()
	})
}

// counted is st's chunks, and the count of reads of them so far.
func counted(st chunkStore) (agent.StoredChunk, *atomic.Int32) {
	reads := new(atomic.Int32)
	return func(ctx context.Context, id [32]byte, buf []byte) ([]byte, error) {
		reads.Add(1)
		return st.get(ctx, id, buf)
	}, reads
}
