package session_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/session"
)

// TestSaveMemoryFlat is `make bench`'s BenchmarkSessionFiles scaled down
// to a unit test: saves of N and of 3N small files through an agent in
// this process (so that its memory counts too), each a first save and an
// unchanged second one, and the peak live heap of each. Memory must not
// grow with the tree: 3N's peak at most a few MiB over N's (buffers
// that fill up to their bounds, batches of the scan and of the fetches,
// gRPC's windows), where holding the entries (the save's, the parent's,
// the known files on both sides) cost about 1 KiB a file, some 10 MiB
// for the 2N more here. The spill budget is lowered so that both sizes
// spill; the files share a few hundred contents, so that the chunks
// (whose IDs a save holds, 32 bytes each and more) stay few.
func TestSaveMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: saves of 20,000 files")
	}
	session.SetSpillBudget(t, 256<<10)
	const n = 5000
	sizes := []int{n, 3 * n}
	// Per save: the first one also fetches chunks, with more in flight.
	growth := [2]uint64{6 << 20, 4 << 20}
	var peaks [2][2]uint64
	for k, files := range sizes {
		ws := t.TempDir()
		writeSmallFiles(t, filepath.Join(ws, "s"), files)
		c := agentIn(t, ws)
		s, _ := diskStore(t)
		// The unchanged save is run three times and its highest peak
		// kept: a peak between two samples is missed, and a missed one
		// at N files would read as growth at 3N.
		for i, round := range []int{0, 1, 1, 1} {
			var m *session.Manifest
			peak := peakLiveHeap(t, func() {
				var err error
				m, err = s.Save(context.Background(), "k", &session.AgentSource{Client: c, Dir: "s", ReuseUnchanged: true})
				if err != nil {
					t.Fatal(err)
				}
			})
			peaks[k][round] = max(peaks[k][round], peak)
			if m.Files != int64(files) || round == 1 && m.NewBytes != 0 {
				t.Fatalf("save %d of %d files: %+v", i+1, files, m.Info())
			}
		}
	}
	for round, name := range []string{"first save", "unchanged save"} {
		small, large := peaks[0][round], peaks[1][round]
		t.Logf("%s: peak live heap over the start %.1f MiB at %d files, %.1f MiB at %d", name, mib(small), sizes[0], mib(large), sizes[1])
		if large > small+growth[round] {
			t.Errorf("%s: peak live heap grew by %.1f MiB from %d to %d files, want at most %.1f MiB",
				name, mib(large-small), sizes[0], sizes[1], mib(growth[round]))
		}
	}
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// peakLiveHeap runs fn and returns the most live heap any garbage
// collection found meanwhile (runtime/metrics' /gc/heap/live:bytes) over
// what was live right before it, with a forced collection every 20
// milliseconds, so that a peak between two of the runtime's own is not
// missed. Counting from the heap before fn leaves out what earlier tests
// and the test's own earlier saves still hold.
func peakLiveHeap(t *testing.T, fn func()) uint64 {
	t.Helper()
	runtime.GC()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	base := sample[0].Value.Uint64()
	var peak uint64
	read := func() {
		metrics.Read(sample)
		peak = max(peak, sample[0].Value.Uint64())
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.GC()
				read()
			}
		}
	}()
	fn()
	close(stop)
	wg.Wait()
	read()
	return peak - min(peak, base)
}

// writeSmallFiles writes n files of 1 to 4 KiB under dir, a hundred to a
// directory two levels deep, their contents drawn from 500.
func writeSmallFiles(t *testing.T, dir string, n int) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(5, 6))
	blobs := make([][]byte, 500)
	for i := range blobs {
		blobs[i] = make([]byte, 1024+rnd.IntN(3073))
		for j := range blobs[i] {
			blobs[i][j] = byte(rnd.Uint32())
		}
	}
	for i := range n {
		d := filepath.Join(dir, fmt.Sprintf("d%02d", i/1000), fmt.Sprintf("e%02d", i/100%10))
		if i%100 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("file-%06d.json", i)), blobs[rnd.IntN(len(blobs))], 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
