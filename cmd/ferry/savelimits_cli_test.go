package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// spaceBomb is a manifest object of a few KB that decodes to more JSON
// than a reader takes, all of it whitespace.
func spaceBomb(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, err := zstd.NewWriter(&b, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	zw.Write([]byte(`{"format":1,"key":"bomb","seq":1,"entries":[`))
	if _, err := io.Copy(zw, io.LimitReader(blanks{}, 257<<20)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

type blanks struct{}

func (blanks) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// TestSessionBrokenManifestCLI: beside keys saved through the embedded
// gateway, a store holds a corrupt manifest and a manifest bomb. session
// list, verify and prune name both by key and snapshot, in text and
// --json, and handle the good keys all the same, which still restore.
func TestSessionBrokenManifestCLI(t *testing.T) {
	g, src, _ := sessionBox(t, 41, transfertest.TreeOptions{Entries: 30})
	store := t.TempDir()
	t.Setenv("FERRY_STORE", store)
	for _, key := range []string{"good-1", "good-2"} {
		wantOK(t, runFerry(t, nil, "-q", "session", "save", "box:sess", key))
	}
	wantOK(t, runFerry(t, nil, "-q", "session", "save", "box:sess", "good-1"))
	writeFile(t, filepath.Join(store, "snapshots", "corrupt", "1"), []byte("not a manifest"), 0o600)
	writeFile(t, filepath.Join(store, "snapshots", "bomb", "1"), spaceBomb(t), 0o600)
	broken := []string{"bomb/1", "corrupt/1"}

	r := runFerry(t, nil, "session", "list")
	if r.code != 0 {
		t.Fatalf("list: exit %d, %s", r.code, r.stderr)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[2] == "unreadable" {
			rows[f[0]+"/"+f[1]] = true
		}
	}
	for _, ref := range broken {
		if !strings.Contains(r.stderr, "unreadable snapshot "+ref+": ") || !rows[ref] {
			t.Errorf("list does not name %s:\nstdout %s\nstderr %s", ref, r.stdout, r.stderr)
		}
	}
	if n := strings.Count(r.stdout, "\ngood-"); n != 3 {
		t.Errorf("list shows %d good snapshots, want 3:\n%s", n, r.stdout)
	}

	r = runFerry(t, nil, "--json", "session", "list")
	var list []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &list); r.code != 0 || err != nil || len(list) != 5 {
		t.Fatalf("list --json: exit %d, %v, %s", r.code, err, r.stdout)
	}
	var gotBroken []string
	for _, i := range list {
		if e, _ := i["error"].(string); e != "" {
			gotBroken = append(gotBroken, i["key"].(string)+"/1")
			if !strings.Contains(e, "invalid manifest") {
				t.Errorf("list --json: %v, want an invalid manifest", i)
			}
		} else if i["files"].(float64) == 0 {
			t.Errorf("list --json: %v", i)
		}
	}
	if strings.Join(gotBroken, " ") != strings.Join(broken, " ") {
		t.Errorf("list --json names %v broken, want %v", gotBroken, broken)
	}

	r = runFerry(t, nil, "session", "verify")
	for _, ref := range broken {
		if r.code != 1 || !strings.Contains(r.stdout, "broken snapshot "+ref+": ") {
			t.Errorf("verify: exit %d, stdout %s; want exit 1 naming %s", r.code, r.stdout, ref)
		}
	}
	r = runFerry(t, nil, "--json", "session", "verify")
	if m := decode(t, r.stdout, "snapshots", "broken", "missing"); r.code != 1 || m["snapshots"].(float64) != 3 || count(m["broken"]) != 2 || count(m["missing"]) != 0 {
		t.Errorf("verify --json: exit %d, %s; want 3 snapshots read, 2 broken, none missing", r.code, r.stdout)
	}

	r = runFerry(t, nil, "session", "prune")
	for _, ref := range broken {
		if r.code != 0 || !strings.Contains(r.stderr, "unreadable snapshot "+ref) {
			t.Errorf("prune: exit %d, stderr %q; want exit 0 naming %s", r.code, r.stderr, ref)
		}
	}
	r = runFerry(t, nil, "--json", "session", "prune", "--keep", "1")
	m := decode(t, r.stdout, "snapshots", "unreadable")
	if r.code != 0 || count(m["snapshots"]) != 1 || count(m["unreadable"]) != 2 {
		t.Fatalf("prune --keep 1: exit %d, %s %s; want good-1/1 removed, 2 unreadable", r.code, r.stdout, r.stderr)
	}
	for _, key := range []string{"good-1", "good-2"} {
		wantOK(t, runFerry(t, nil, "-q", "session", "restore", key, "box:"+key))
		transfertest.EqualTrees(t, src, filepath.Join(g.Root, "box", key))
	}
}

// TestSessionSaveSymlinkCLI: an absolute symlink in the session
// directory fails the save in POSIX mode (the download's extractor) and
// in agent mode (the save's own check) alike, naming the entry, and
// commits nothing.
func TestSessionSaveSymlinkCLI(t *testing.T) {
	_, src, _ := sessionBox(t, 43, transfertest.TreeOptions{Entries: 10})
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "abs")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FERRY_STORE", t.TempDir())
	for _, mode := range []string{"posix", "agent"} {
		r := runFerry(t, nil, "--mode", mode, "session", "save", "box:sess", "key-"+mode)
		if r.code != 1 || !strings.Contains(r.stderr, `abs"`) || !strings.Contains(r.stderr, "link escapes the destination") {
			t.Errorf("%s: exit %d, stderr %q; want exit 1, the link escapes, naming abs", mode, r.code, r.stderr)
		}
		if r := runFerry(t, nil, "--json", "session", "list", "key-"+mode); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("%s: list after the failed save: exit %d, %s %s", mode, r.code, r.stdout, r.stderr)
		}
	}
}

// count is the length of a JSON array, 0 for null.
func count(v any) int {
	a, _ := v.([]any)
	return len(a)
}
