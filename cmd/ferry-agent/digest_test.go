package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// TestSelfDigest: the digest is the binary's SHA-256, kept beside it for
// the next start; a kept digest of another version of the file (another
// inode, size or mtime) is not used.
func TestSelfDigest(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(bin)
	kept := digestFile(exe)
	t.Cleanup(func() { os.Remove(kept) })
	fi, err := os.Stat(exe)
	if err != nil {
		t.Fatal(err)
	}
	stamp := fileStamp(fi)
	for _, stale := range []string{
		"1 2 3 " + strings.Repeat("00", sha256.Size) + "\n",      // another version of the file
		stamp + " " + strings.Repeat("ab", sha256.Size+1) + "\n", // too long a digest
		stamp + " " + strings.Repeat("zz", sha256.Size) + "\n",   // not hex
		stamp + " " + strings.Repeat("ab", 4096) + "\n",          // far too long a file
	} {
		if err := os.WriteFile(kept, []byte(stale), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := selfDigest(); err != nil || got != want {
			t.Fatalf("kept %.40q...: selfDigest = %x, %v; want %x", stale, got, err, want)
		}
	}
	for i := range 2 {
		got, err := selfDigest()
		if err != nil || got != want {
			t.Fatalf("start %d: selfDigest = %x, %v; want %x", i, got, err, want)
		}
		b, err := os.ReadFile(kept)
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(b)), " "+hex.EncodeToString(want[:])) {
			t.Fatalf("start %d: kept digest %q, %v", i, b, err)
		}
	}
}
