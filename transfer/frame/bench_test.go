package frame

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

// BenchmarkWriter measures framing throughput (MB/s of plaintext) per mode
// on random data (Auto should skip most compression work) and JSONL-like
// text (Auto compresses every block). It reports the wire/plaintext ratio.
func BenchmarkWriter(b *testing.B) {
	const size = 16 << 20
	for _, d := range []struct {
		name string
		data []byte
	}{{"random", randomData(size)}, {"text", textData(size)}} {
		for _, m := range []Mode{Auto, Zstd, S2, None} {
			b.Run(fmt.Sprintf("%s/%v", d.name, m), func(b *testing.B) {
				b.SetBytes(size)
				var st Stats
				for b.Loop() {
					w := NewWriter(io.Discard, WriterOptions{Compress: m})
					w.Write(d.data)
					if err := w.Close(); err != nil {
						b.Fatal(err)
					}
					st = w.Stats()
				}
				b.ReportMetric(float64(st.Wire)/float64(st.Plaintext), "wire/plain")
			})
		}
	}
}

// BenchmarkReader measures decoding throughput of Auto-mode streams.
func BenchmarkReader(b *testing.B) {
	const size = 16 << 20
	for _, d := range []struct {
		name string
		data []byte
	}{{"random", randomData(size)}, {"text", textData(size)}} {
		var buf bytes.Buffer
		w := NewWriter(&buf, WriterOptions{})
		w.Write(d.data)
		w.Close()
		b.Run(d.name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				if _, err := io.Copy(io.Discard, NewReader(bytes.NewReader(buf.Bytes()), ReaderOptions{})); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReaderBuffer reads text streams the way the extractor does,
// with a buffer of a block or more, and with a small one: the first lets
// S2 and raw blocks decode straight into the caller's buffer.
func BenchmarkReaderBuffer(b *testing.B) {
	const size = 16 << 20
	for _, m := range []Mode{S2, None} {
		var buf bytes.Buffer
		w := NewWriter(&buf, WriterOptions{Compress: m, NoDigest: true})
		w.Write(textData(size))
		w.Close()
		for _, n := range []int{32 << 10, DefaultBlockSize} {
			b.Run(fmt.Sprintf("%v/buf=%dk", m, n>>10), func(b *testing.B) {
				b.SetBytes(size)
				p := make([]byte, n)
				for b.Loop() {
					r := NewReader(bytes.NewReader(buf.Bytes()), ReaderOptions{NoDigest: true})
					for {
						if _, err := r.Read(p); err == io.EOF {
							break
						} else if err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
