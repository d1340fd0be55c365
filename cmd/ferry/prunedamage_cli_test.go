package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// TestSessionPruneDamageCLI is issue 20's store in bad shape, through the
// embedded gateway and the agent: an unreadable newest manifest is named
// by prune --keep 1, never counted as the one kept (the last good
// snapshot stays and restores), and saves go on past it; a chunk the
// store lost is sent again by the next save, which restores; leftover
// temporary files of a killed writer are removed and counted.
func TestSessionPruneDamageCLI(t *testing.T) {
	g, src, _ := sessionBox(t, 31, transfertest.TreeOptions{Entries: 40})
	store := t.TempDir()
	t.Setenv("FERRY_STORE", store)
	const key = "damaged-key"
	wantOK(t, runFerry(t, nil, "-q", "session", "save", "box:sess", key))
	writeFile(t, filepath.Join(store, "snapshots", key, "2"), []byte("not a manifest"), 0o600)

	r := runFerry(t, nil, "session", "prune", "--keep", "1")
	if r.code != 0 || !strings.Contains(r.stderr, "unreadable snapshot "+key+"/2") {
		t.Fatalf("prune --keep 1 beside a damaged newest: exit %d, stderr %q; want exit 0 naming %s/2", r.code, r.stderr, key)
	}
	wantOK(t, runFerry(t, nil, "-q", "session", "restore", "--snapshot", "1", key, "box:one"))
	transfertest.EqualTrees(t, src, filepath.Join(g.Root, "box", "one"))
	r = runFerry(t, nil, "--json", "session", "save", "box:sess", key)
	if r.code != 0 || decode(t, r.stdout, "snapshot")["snapshot"].(float64) != 3 {
		t.Fatalf("save past the damaged manifest: exit %d, %s %s; want snapshot 3", r.code, r.stdout, r.stderr)
	}

	// A chunk lost from the store: the next save sends it again, though
	// no file changed.
	chunks, _ := filepath.Glob(filepath.Join(store, "chunks", "*", "*"))
	if len(chunks) == 0 {
		t.Fatal("no chunks in the store")
	}
	if err := os.Remove(chunks[0]); err != nil {
		t.Fatal(err)
	}
	r = runFerry(t, nil, "--json", "session", "save", "box:sess", key)
	if r.code != 0 {
		t.Fatalf("save after a lost chunk: exit %d, %s", r.code, r.stderr)
	}
	if m := decode(t, r.stdout, "new_chunks", "snapshot"); m["new_chunks"].(float64) < 1 || m["snapshot"].(float64) != 4 {
		t.Fatalf("save after a lost chunk: %s; want the chunk sent again as snapshot 4", r.stdout)
	}
	wantOK(t, runFerry(t, nil, "-q", "session", "restore", key, "box:four"))
	transfertest.EqualTrees(t, src, filepath.Join(g.Root, "box", "four"))

	// Temporary files of writers killed mid-Put, one past the grace
	// period and one not.
	old, young := filepath.Join(store, "chunks", "00", ".tmp-00000000deadbeef"), filepath.Join(store, "snapshots", key, ".tmp-00000000cafebabe")
	for _, p := range []string{old, young} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		writeFile(t, p, []byte("partial"), 0o600)
	}
	past := time.Now().Add(-3 * time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	r = runFerry(t, nil, "session", "prune")
	if r.code != 0 || !strings.Contains(r.stderr, "removed 1 leftover temporary file(s)") {
		t.Fatalf("prune with leftover temporary files: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the old temporary file is still there: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("the young temporary file is gone: %v", err)
	}
	if err := os.Chtimes(young, past, past); err != nil {
		t.Fatal(err)
	}
	r = runFerry(t, nil, "--json", "session", "verify")
	// The damaged manifest 2 is still there: verify reports it, and
	// removes the temporary file all the same.
	if r.code != 1 || decode(t, r.stdout, "temp_files")["temp_files"].(float64) != 1 {
		t.Fatalf("verify: exit %d, %s; want the damaged manifest reported and 1 temporary file removed", r.code, r.stdout)
	}
}
