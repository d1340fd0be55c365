package agent_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/agent/server"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// BenchmarkTree measures Put and Get of one file through an in-process
// agent (pipes, no exec channel): random bytes and JSONL-like text, per
// compression mode. Host and agent share the process, so a CPU profile
// (-cpuprofile) shows both sides of the data path.
func BenchmarkTree(b *testing.B) {
	const size = 64 << 20
	src := b.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, size)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	text := make([]byte, 0, size+4096)
	for len(text) < size {
		text = append(text, `{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"`...)
		for range 5 + rng.IntN(40) {
			text = append(text, benchWords[rng.IntN(len(benchWords))]...)
			text = append(text, ' ')
		}
		text = strconv.AppendInt(append(text, `"}]},"n":`...), int64(rng.IntN(100000)), 10)
		text = append(text, "}\n"...)
	}
	text = text[:size]
	for name, data := range map[string][]byte{"random": random, "text": text} {
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ws := b.TempDir()
	c := agenttest.InProcess(b, server.Config{Workspace: ws})
	ctx := context.Background()
	for _, name := range []string{"random", "text"} {
		for _, m := range []frame.Mode{frame.Auto, frame.None} {
			b.Run(fmt.Sprintf("put/%s/%v", name, m), func(b *testing.B) {
				b.SetBytes(size)
				i := 0
				for b.Loop() {
					dest := fmt.Sprintf("put-%s-%v-%d", name, m, i)
					i++
					_, err := c.Put(ctx, agent.PutSpec{Dest: dest, Place: archive.PlaceNew, Compress: m},
						func(w *archive.Writer) error { return w.Add(ctx, filepath.Join(src, name), name) })
					if err != nil {
						b.Fatal(err)
					}
					os.RemoveAll(filepath.Join(ws, dest))
				}
			})
			b.Run(fmt.Sprintf("get/%s/%v", name, m), func(b *testing.B) {
				if err := os.WriteFile(filepath.Join(ws, name), map[string][]byte{"random": random, "text": text}[name], 0o644); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(size)
				local := b.TempDir()
				i := 0
				for b.Loop() {
					dst := filepath.Join(local, strconv.Itoa(i))
					i++
					_, err := c.Get(ctx, agent.GetSpec{Names: []string{name}, Local: dst, Place: archive.PlaceNew, Compress: m})
					if err != nil {
						b.Fatal(err)
					}
					os.RemoveAll(dst)
				}
			})
		}
	}
}

var benchWords = []string{"the", "function", "returns", "an", "error", "when", "the", "file", "is", "missing",
	"go", "test", "./...", "ok", "FAIL", "package", "main", "import", "fmt", "func", "nil", "err", "if", "return",
	"server", "client", "stream", "buffer", "context", "cancel", "timeout", "read", "write", "close"}

// BenchmarkTreeFiles measures Put and Get of 10,000 files of 2 KiB in 100
// directories through an in-process agent, the per-file cost that sets
// the small-files rows of `make bench`. Set TMPDIR=/dev/shm to leave the
// disk out of it.
func BenchmarkTreeFiles(b *testing.B) {
	src := filepath.Join(b.TempDir(), "files")
	writeSmallFiles(b, 10000, func(i int) string { return filepath.Join(src, fmt.Sprintf("d%03d", i%100)) })
	ws := b.TempDir()
	c := agenttest.InProcess(b, server.Config{Workspace: ws})
	ctx := context.Background()
	b.Run("put", func(b *testing.B) {
		i := 0
		for b.Loop() {
			dest := fmt.Sprintf("put-%d", i)
			i++
			_, err := c.Put(ctx, agent.PutSpec{Dest: dest, Place: archive.PlaceNew, Compress: frame.Auto},
				func(w *archive.Writer) error { return w.Add(ctx, src, "files") })
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			os.RemoveAll(filepath.Join(ws, dest))
			b.StartTimer()
		}
	})
	if err := os.CopyFS(filepath.Join(ws, "files"), os.DirFS(src)); err != nil {
		b.Fatal(err)
	}
	b.Run("get", func(b *testing.B) {
		local := b.TempDir()
		i := 0
		for b.Loop() {
			dst := filepath.Join(local, strconv.Itoa(i))
			i++
			_, err := c.Get(ctx, agent.GetSpec{Names: []string{"files"}, Local: dst, Place: archive.PlaceNew, Compress: frame.Auto})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			os.RemoveAll(dst)
			b.StartTimer()
		}
	})
}

// BenchmarkScanFiles measures a session scan (ScanStream, nothing known)
// of 10,000 files of 2 KiB, a hundred directories two levels deep,
// through an in-process agent: the agent's per-file cost in a first save.
// Set TMPDIR=/dev/shm to leave the disk out of it.
func BenchmarkScanFiles(b *testing.B) {
	const files = 10000
	ws := b.TempDir()
	writeSmallFiles(b, files, func(i int) string {
		return filepath.Join(ws, "s", fmt.Sprintf("d%02d", i%10), fmt.Sprintf("e%03d", i%100))
	})
	c := agenttest.InProcess(b, server.Config{Workspace: ws})
	ctx := context.Background()
	for b.Loop() {
		n := 0
		err := c.Scan(ctx, "s", nil, agent.ScanOptions{}, func(e agent.ScanEntry) error {
			if e.Kind == archive.File {
				n++
			}
			return nil
		})
		if err != nil || n != files {
			b.Fatalf("scan: %v, %d files, want %d", err, n, files)
		}
	}
}

// writeSmallFiles writes n files of 2 KiB of random bytes, the i-th,
// named f<i>, in the directory dirOf(i).
func writeSmallFiles(b *testing.B, n int, dirOf func(i int) string) {
	b.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 2<<10)
	for i := range n {
		d := dirOf(i)
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
