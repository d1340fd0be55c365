package archive_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// BenchmarkExtractSmallFiles extracts 10,000 files of 2 KiB, with digests
// as the agent takes them, from each format: what the agent's CPU does in
// an upload of many small files. Run it with TMPDIR on a tmpfs to weigh
// the extractor rather than the disk.
func BenchmarkExtractSmallFiles(b *testing.B) {
	src := b.TempDir()
	rng := rand.NewChaCha8([32]byte{3})
	buf := make([]byte, 2<<10)
	for i := range 10000 {
		dir := filepath.Join(src, fmt.Sprintf("d%03d", i%100))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		_, _ = rng.Read(buf)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for _, f := range []archive.Format{archive.FormatTar, archive.FormatEntries} {
		b.Run(f.String(), func(b *testing.B) {
			data, _ := archiveIn(b, src, f)
			dst := b.TempDir()
			b.SetBytes(int64(len(data)))
			b.ReportMetric(float64(len(data)), "stream-bytes")
			for i := range b.N {
				d := filepath.Join(dst, fmt.Sprint(i))
				_, err := archive.Extract(context.Background(), bytes.NewReader(data), d, archive.ExtractOptions{
					Format: f, OnFile: func(archive.FileDigest) error { return nil }})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := os.RemoveAll(d); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
