package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkDiff times the workspace diff of a FERRY_BENCH_DIFF_FILES-file
// (default 10,000), FERRY_BENCH_DIFF_SIZE-byte (default 1 GiB) directory
// of random content where 1% of the files were rewritten, in agent mode
// (hashed next to the data) and POSIX mode (downloaded), against the
// agent-mode download of the same directory (ferry cp). The goal: the
// agent-mode diff well under the download's time. Run it scaled down,
// e.g. FERRY_BENCH=1 FERRY_BENCH_DIFF_FILES=1000
// FERRY_BENCH_DIFF_SIZE=67108864 go test -run XXX -bench Diff ./cmd/ferry/.
func BenchmarkDiff(b *testing.B) {
	needBench(b)
	n := envInt(b, "FERRY_BENCH_DIFF_FILES", 10000)
	size := envInt(b, "FERRY_BENCH_DIFF_SIZE", 1<<30)
	s := startBench(b)
	ws := filepath.Join(s.sandbox, "ws")
	rng := rand.New(rand.NewPCG(1, 2))
	per := size / n
	buf := make([]byte, per)
	for i := range n {
		for j := range buf {
			buf[j] = byte(rng.Uint32())
		}
		p := filepath.Join(ws, fmt.Sprintf("d%02d", i%100), fmt.Sprintf("f%05d", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	dir := b.TempDir()
	m := filepath.Join(dir, "before.json")
	save, _ := timed(b, []string{s.bin, "--mode", "agent", "diff", "bench:ws", "--save", m, "-q"}, s.ferryEnv, false)
	changed := max(n/100, 1)
	for i := range changed {
		idx := (i * 100) % n
		p := filepath.Join(ws, fmt.Sprintf("d%02d", idx%100), fmt.Sprintf("f%05d", idx))
		if err := os.WriteFile(p, []byte(fmt.Sprintf("rewritten %d", i)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	type row struct {
		name    string
		seconds float64
		wire    int64
	}
	var rows []row
	for i := 0; i < b.N; i++ {
		rows = rows[:0]
		for _, mode := range []string{"agent", "posix"} {
			res, out := timed(b, []string{s.bin, "--json", "--mode", mode, "diff", "bench:ws", "--since", m}, s.ferryEnv, false)
			var rep struct {
				WireBytes int64 `json:"wire_bytes"`
				Totals    struct {
					Modified int `json:"modified"`
				} `json:"totals"`
			}
			if err := json.Unmarshal(out, &rep); err != nil || rep.Totals.Modified != changed {
				b.Fatalf("ferry diff --mode %s: %v, %d modified; want %d\n%s", mode, err, rep.Totals.Modified, changed, out)
			}
			rows = append(rows, row{"diff --mode " + mode, res.seconds, rep.WireBytes})
		}
		dst := filepath.Join(dir, fmt.Sprintf("down-%d", i))
		res := s.ferryCp(b, "agent", "bench:ws", dst)
		rows = append(rows, row{"cp --mode agent (download)", res.seconds, res.wire})
		removeAll(b, dst)
	}
	fmt.Printf("\nworkspace diff of %d files, %d bytes, %d rewritten (manifest saved in %.2fs)\n", n, per*n, changed, save.seconds)
	fmt.Printf("%-28s %9s %14s %10s\n", "case", "seconds", "wire bytes", "/download")
	for _, r := range rows {
		fmt.Printf("%-28s %9.2f %14d %10.2f\n", r.name, r.seconds, r.wire, r.seconds/rows[len(rows)-1].seconds)
	}
	goal := "ok"
	if rows[0].seconds > rows[len(rows)-1].seconds/2 {
		goal = "MISS"
	}
	fmt.Printf("goal: agent-mode diff under half the download's time: %s\n", goal)
}
