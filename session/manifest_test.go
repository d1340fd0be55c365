package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/cdc"
)

func validManifest() *Manifest {
	c1, c2 := Hash([]byte("one")), Hash([]byte("two"))
	return &Manifest{
		Format: manifestFormat, Key: "k", Seq: 2, Parent: 1, Time: time.Unix(1, 2).UTC(),
		Files: 2, Dirs: 1, Symlinks: 1, Bytes: 100,
		Entries: []Entry{
			{Path: "d", Kind: KindDir, Mode: 0o755, MTime: 1},
			{Path: "d/f", Kind: KindFile, Mode: 0o600, MTime: 2, Size: 100, Chunks: []ChunkRef{{c1, 60}, {c2, 40}}},
			{Path: "e", Kind: KindFile, Mode: 0o644, MTime: 3},
			{Path: "l", Kind: KindSymlink, Mode: 0o777, MTime: 4, Target: "d/f"},
		},
	}
}

func TestManifestRoundTrip(t *testing.T) {
	m := validManifest()
	data, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeManifest(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(m)
	b, _ := json.Marshal(got)
	if !bytes.Equal(a, b) {
		t.Errorf("decoded manifest differs:\n%s\n%s", a, b)
	}
}

func TestManifestRefused(t *testing.T) {
	cases := []struct {
		name   string
		change func(m *Manifest)
		want   string
	}{
		{"format", func(m *Manifest) { m.Format = 2 }, "format"},
		{"key", func(m *Manifest) { m.Key = "../k" }, "invalid key"},
		{"seq", func(m *Manifest) { m.Seq = 0 }, "sequence"},
		{"parent", func(m *Manifest) { m.Parent = 2 }, "sequence"},
		{"absolute", func(m *Manifest) { m.Entries[2].Path = "/e" }, "unsafe path"},
		{"dotdot", func(m *Manifest) { m.Entries[2].Path = "d/../e" }, "unsafe path"},
		{"dot", func(m *Manifest) { m.Entries[0].Path = "." }, "unsafe path"},
		{"empty", func(m *Manifest) { m.Entries[0].Path = "" }, "unsafe path"},
		{"nul", func(m *Manifest) { m.Entries[2].Path = "e\x00" }, "unsafe path"},
		{"trailing slash", func(m *Manifest) { m.Entries[2].Path = "e/" }, "unsafe path"},
		{"duplicate", func(m *Manifest) { m.Entries[2].Path = "d/f" }, "out of order or duplicate"},
		{"unsorted", func(m *Manifest) { m.Entries[0], m.Entries[2] = m.Entries[2], m.Entries[0] }, "out of order"},
		{"orphan", func(m *Manifest) { m.Entries[0].Path = "c" }, "parent is not a directory"},
		{"through symlink", func(m *Manifest) {
			m.Entries = append(m.Entries, Entry{Path: "l/x", Kind: KindFile})
			m.Files++
		}, "parent is not a directory"},
		{"size", func(m *Manifest) { m.Entries[1].Size = 99; m.Bytes = 99 }, "chunks add up"},
		{"chunk size", func(m *Manifest) { m.Entries[1].Chunks[0].Size = MaxChunkSize + 1 }, "bytes"},
		{"zero chunk", func(m *Manifest) { m.Entries[1].Chunks[0].Size = 0; m.Entries[1].Chunks[1].Size = 100 }, "bytes"},
		{"setuid", func(m *Manifest) { m.Entries[1].Mode |= 0o4000 }, "permission bits"},
		{"kind", func(m *Manifest) { m.Entries[2].Kind = "fifo" }, "unknown kind"},
		{"dir chunks", func(m *Manifest) { m.Entries[0].Size = 1 }, "directory with"},
		{"symlink target", func(m *Manifest) { m.Entries[3].Target = "" }, "bad symlink target"},
		{"file target", func(m *Manifest) { m.Entries[2].Target = "x" }, "file with a target"},
		{"totals", func(m *Manifest) { m.Files = 3 }, "totals"},
		{"bytes", func(m *Manifest) { m.Bytes = 1 }, "totals"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := validManifest()
			tc.change(m)
			js, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			_, err = parseManifest(js)
			if !errors.Is(err, ErrManifest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parse: %v, want ErrManifest with %q", err, tc.want)
			}
		})
	}
	for _, js := range []string{"", "null", "{}", `{"format":1,"bogus":1}`, "[]", `{"format":1} {}`} {
		if _, err := parseManifest([]byte(js)); !errors.Is(err, ErrManifest) {
			t.Errorf("parse %q: %v, want ErrManifest", js, err)
		}
	}
}

func FuzzParseManifest(f *testing.F) {
	js, _ := json.Marshal(validManifest())
	f.Add(js)
	f.Add([]byte(`{"format":1,"key":"k","seq":1,"entries":[{"path":"a","kind":"dir"}],"dirs":1}`))
	f.Add([]byte(`{"format":1,"key":"k","seq":1,"entries":[{"path":"../a","kind":"file"}],"files":1}`))
	f.Fuzz(func(t *testing.T, js []byte) {
		m, err := parseManifest(js)
		if err != nil {
			if !errors.Is(err, ErrManifest) {
				t.Fatalf("error %v does not match ErrManifest", err)
			}
			return
		}
		// What parses re-encodes to something that parses the same.
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := parseManifest(again)
		if err != nil {
			t.Fatalf("re-encoded manifest refused: %v", err)
		}
		if a, _ := json.Marshal(m2); !bytes.Equal(a, again) {
			t.Fatal("re-encoding is not stable")
		}
	})
}

func TestMaxChunkSize(t *testing.T) {
	if MaxChunkSize != cdc.Default().Max {
		t.Errorf("MaxChunkSize %d, cdc.Default().Max %d", MaxChunkSize, cdc.Default().Max)
	}
}

func TestParseID(t *testing.T) {
	id := Hash([]byte("x"))
	if got, err := ParseID(id.String()); err != nil || got != id {
		t.Errorf("ParseID(%s) = %s, %v", id, got, err)
	}
	for _, s := range []string{"", "00", strings.ToUpper(id.String()), id.String()[:63] + "g"} {
		if _, err := ParseID(s); err == nil {
			t.Errorf("ParseID(%q) succeeded", s)
		}
	}
	if _, ok := parseChunkName(chunkName(id)); !ok {
		t.Error("parseChunkName(chunkName(id)) failed")
	}
	if _, ok := parseChunkName("chunks/00/" + id.String()); ok && id.String()[:2] != "00" {
		t.Error("parseChunkName accepted a chunk in the wrong directory")
	}
}

func TestValidKey(t *testing.T) {
	for _, k := range []string{TaskKey("rtzll/rascal", "42"), "a", "A.b_c-9"} {
		if err := ValidKey(k); err != nil {
			t.Errorf("ValidKey(%q): %v", k, err)
		}
	}
	for _, k := range []string{"", ".", "..", ".hidden", "-x", "a/b", "a b", strings.Repeat("a", 129), "é"} {
		if err := ValidKey(k); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidKey(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

func TestDefaultLocation(t *testing.T) {
	home, _ := os.UserHomeDir()
	cases := []struct{ store, xdg, want string }{
		{"/srv/ferry", "/state", "/srv/ferry"},
		{"s3://bucket/prefix", "", "s3://bucket/prefix"},
		{"", "/state", "/state/ferry"},
		{"", "relative", filepath.Join(home, ".local/state/ferry")},
		{"", "", filepath.Join(home, ".local/state/ferry")},
	}
	for _, tc := range cases {
		t.Setenv("FERRY_STORE", tc.store)
		t.Setenv("XDG_STATE_HOME", tc.xdg)
		if got, err := DefaultLocation(); err != nil || got != tc.want {
			t.Errorf("FERRY_STORE=%q XDG_STATE_HOME=%q: %q, %v; want %q", tc.store, tc.xdg, got, err, tc.want)
		}
	}
}

// TestManifestFormatCompatible: what writeManifest stores, the reader of
// before the streams (one DecodeAll, one json decode) reads; what that
// code stored (one json.Marshal, one EncodeAll: a frame whose window is
// its whole content), readManifest reads.
func TestManifestFormatCompatible(t *testing.T) {
	m := validManifest()
	stored, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	js, err := manifestDecoder.DecodeAll(stored, nil)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var old Manifest
	if err := dec.Decode(&old); err != nil || dec.More() {
		t.Fatalf("old reader: %v (more: %v)", err, dec.More())
	}
	want, _ := json.Marshal(m)
	if got, _ := json.Marshal(&old); !bytes.Equal(got, want) {
		t.Errorf("old reader read\n%s\nwant\n%s", got, want)
	}

	oldStored := encoder.EncodeAll(want, nil)
	got, err := decodeManifest(bytes.NewReader(oldStored))
	if err != nil {
		t.Fatal(err)
	}
	if js, _ := json.Marshal(got); !bytes.Equal(js, want) {
		t.Errorf("old manifest read as\n%s\nwant\n%s", js, want)
	}
}

// TestManifestCaps: past its cap, the writer's and the reader's byte
// counts fail with ErrManifest, naming the cap; up to it they pass.
func TestManifestCaps(t *testing.T) {
	w := &capWriter{w: io.Discard, max: 10, what: "JSON"}
	if _, err := w.Write(make([]byte, 10)); err != nil {
		t.Fatalf("write up to the cap: %v", err)
	}
	if _, err := w.Write([]byte{0}); !errors.Is(err, ErrManifest) || !strings.Contains(err.Error(), "over 10 bytes of JSON") {
		t.Fatalf("write past the cap: %v", err)
	}
	for _, n := range []int{10, 11} {
		r := &capReader{r: bytes.NewReader(make([]byte, n)), max: 10, what: "stored bytes"}
		_, err := io.ReadAll(r)
		if over := n > 10; over != (err != nil) || over && !errors.Is(err, ErrManifest) {
			t.Errorf("read of %d bytes, cap 10: %v", n, err)
		}
	}
}
