package bundle

import (
	"bytes"
	"strings"
	"testing"
	"testing/fstest"
)

// TestLoad: the digests are read at once, the builds only when asked for.
func TestLoad(t *testing.T) {
	digest := strings.Repeat("ab", 32)
	fsys := fstest.MapFS{
		"blobs/ferry-agent-linux-amd64.zst":    {Data: []byte("zstd bytes")},
		"blobs/ferry-agent-linux-amd64.sha256": {Data: []byte(digest + "  -\n")},
		"blobs/README":                         {Data: []byte("x")},
	}
	b, err := load(fsys)
	if err != nil {
		t.Fatal(err)
	}
	bin, ok := b["amd64"]
	if !ok || len(b) != 1 {
		t.Fatalf("bundle %v, want amd64 alone", b)
	}
	if bin.Zstd != nil || bin.Load == nil {
		t.Fatalf("the build was read up front")
	}
	if z, err := bin.Load(); err != nil || !bytes.Equal(z, []byte("zstd bytes")) {
		t.Fatalf("Load = %q, %v", z, err)
	}
	delete(fsys, "blobs/ferry-agent-linux-amd64.zst")
	if _, err := bin.Load(); err == nil {
		t.Fatal("Load of a missing build succeeded")
	}
}
