package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkSessionFiles is issue 20's session of many small files: n
// files (FERRY_BENCH_SESSION_FILES, default 300,000) of 1 to 4 KiB of
// random bytes, a hundred to a directory two levels deep, saved from the
// sandbox with `ferry session save` through the embedded gateway in agent
// mode into a local store, then saved again unchanged; and the same for
// n/3 files, to show how memory goes with the file count. It prints each
// save's time and the peak RSS of ferry (GNU time) and of the agent in the
// sandbox (its VmHWM, sampled from /proc every 50 ms while the save
// runs), and what 100,000 more files cost of each. The goal is ferry's
// peak RSS at most 128 MiB in every save; the agent's is held to the
// same. A missed goal is marked MISS; it does not fail the benchmark.
// Every save's --json is checked (files, and no new bytes unchanged).
//
// On a disk the first save's fsync of each of n chunks takes minutes;
// TMPDIR=/dev/shm takes the disk out.
func BenchmarkSessionFiles(b *testing.B) {
	needBench(b)
	n := envInt(b, "FERRY_BENCH_SESSION_FILES", 300000)
	s := startBench(b)
	sizes := []int{max(n/3, 1), n}
	type row struct {
		files          int
		name           string
		ferry          sessResult
		agentRSS       int64 // KiB
		manifestStored int64
	}
	var rows []row
	for i := 0; i < b.N; i++ {
		rows = rows[:0]
		for _, size := range sizes {
			rel := fmt.Sprintf("files-%d-%d", size, i)
			src := filepath.Join(s.sandbox, rel)
			writeManyFiles(b, src, size, uint64(size))
			store := filepath.Join(b.TempDir(), "store")
			for round, name := range []string{"first save", "unchanged save"} {
				w := s.watchAgent(b)
				f := s.ferrySession(b, "agent", store, "save", "bench:"+rel, "bench-files")
				agent := w.stop()
				if f.files != int64(size) || round == 1 && f.newBytes != 0 {
					b.Fatalf("%s of %d files: %d files, %d new bytes", name, size, f.files, f.newBytes)
				}
				fi, err := os.Stat(filepath.Join(store, "snapshots", "bench-files", strconv.Itoa(round+1)))
				if err != nil {
					b.Fatal(err)
				}
				rows = append(rows, row{files: size, name: name, ferry: f, agentRSS: agent, manifestStored: fi.Size()})
			}
			removeAll(b, src)
		}
	}

	fmt.Printf("\nferry session save --mode agent, local store: files of 1-4 KiB, 100 to a directory\n")
	fmt.Printf("%9s %-15s %9s %12s %12s %10s\n", "files", "case", "ferry s", "ferry RSS", "agent RSS", "manifest")
	var ferryMax, agentMax int64
	for _, r := range rows {
		ferryMax, agentMax = max(ferryMax, r.ferry.maxRSS), max(agentMax, r.agentRSS)
		fmt.Printf("%9d %-15s %9.2f %8.1f MiB %8.1f MiB %10s\n", r.files, r.name, r.ferry.seconds,
			float64(r.ferry.maxRSS)/1024, float64(r.agentRSS)/1024, byteLabel(r.manifestStored))
	}
	fmt.Printf("\nper 100,000 files more (%d to %d):\n", sizes[0], sizes[1])
	for k := range 2 {
		small, large := rows[k], rows[2+k]
		per := 100000 / float64(large.files-small.files) / 1024
		fmt.Printf("  %-15s ferry %+6.1f MiB, agent %+6.1f MiB, %+6.2f s\n", small.name,
			float64(large.ferry.maxRSS-small.ferry.maxRSS)*per, float64(large.agentRSS-small.agentRSS)*per,
			(large.ferry.seconds-small.ferry.seconds)*100000/float64(large.files-small.files))
	}
	mark := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	fmt.Printf("\ngoals\n")
	fmt.Printf("  %-4s ferry peak RSS over saves of up to %d files %.1f MiB, goal <= 128 MiB\n", mark(ferryMax <= 128<<10), n, float64(ferryMax)/1024)
	fmt.Printf("  %-4s agent peak RSS over saves of up to %d files %.1f MiB, goal <= 128 MiB\n\n", mark(agentMax <= 128<<10), n, float64(agentMax)/1024)
	b.ReportMetric(float64(ferryMax)/1024, "ferry-RSS-MiB")
	b.ReportMetric(float64(agentMax)/1024, "agent-RSS-MiB")
	b.ReportMetric(rows[len(rows)-2].ferry.seconds, "first-save-s")
	b.ReportMetric(rows[len(rows)-1].ferry.seconds, "unchanged-save-s")
}

// writeManyFiles writes n files of 1 to 4 KiB of random bytes from seed
// under dir, a hundred to a directory two levels deep.
func writeManyFiles(b testing.TB, dir string, n int, seed uint64) {
	b.Helper()
	rng := rand.New(rand.NewPCG(seed, 20))
	buf := make([]byte, 4<<10)
	for i := range n {
		d := filepath.Join(dir, fmt.Sprintf("d%03d", i/1000), fmt.Sprintf("e%02d", i/100%10))
		if i%100 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		data := buf[:1024+rng.IntN(3073)]
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("file-%06d.json", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// agentWatch samples the peak RSS (VmHWM) of the bench's agent processes:
// those whose command line names the agent cache.
type agentWatch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	peak   int64 // KiB
}

// watchAgent samples the agents' peak RSS until stop.
func (s *benchSetup) watchAgent(b testing.TB) *agentWatch {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &agentWatch{cancel: cancel}
	mark := []byte(s.agentCache)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			w.peak = max(w.peak, agentHWM(mark))
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// stop ends the sampling and returns the peak, in KiB.
func (w *agentWatch) stop() int64 {
	w.cancel()
	w.wg.Wait()
	return w.peak
}

// agentHWM is the largest VmHWM, in KiB, of the processes whose command
// line holds mark.
func agentHWM(mark []byte) int64 {
	procs, _ := os.ReadDir("/proc")
	var peak int64
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmd, mark) {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", p.Name(), "status"))
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				peak = max(peak, kib)
			}
		}
	}
	return peak
}
