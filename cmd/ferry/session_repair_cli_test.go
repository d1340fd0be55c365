package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/session/s3store/s3test"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// TestSessionRepairCLI: chunks deleted from a local store make verify
// exit 1; verify --repair SANDBOX:DIR stores them again from the sandbox
// directory the session was saved from, through the embedded gateway, in
// each mode, and the snapshot restores byte-identical. A chunk the
// directory no longer holds stays missing, and says so.
func TestSessionRepairCLI(t *testing.T) {
	for _, mode := range []string{"posix", "agent"} {
		t.Run(mode, func(t *testing.T) { testSessionRepairCLI(t, mode) })
	}
}

func testSessionRepairCLI(t *testing.T, mode string) {
	g, src, _ := sessionBox(t, 21, transfertest.TreeOptions{Entries: 40, BigFiles: 1, BigFileSize: 1 << 20})
	store := t.TempDir()
	t.Setenv("FERRY_STORE", store)
	wantOK(t, runFerry(t, nil, "-q", "--mode", mode, "session", "save", "box:sess", "task-1"))

	chunks, _ := filepath.Glob(filepath.Join(store, "chunks", "*", "*"))
	if len(chunks) < 4 {
		t.Fatalf("%d chunks in the store, want 4 or more", len(chunks))
	}
	for _, c := range chunks[:2] {
		if err := os.Remove(c); err != nil {
			t.Fatal(err)
		}
	}
	r := runFerry(t, nil, "session", "verify")
	if r.code != 1 || !strings.Contains(r.stdout, "missing chunk "+filepath.Base(chunks[0])) {
		t.Fatalf("verify after the loss: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	wantFailure(t, runFerry(t, nil, "--mode", mode, "session", "verify", "--repair", "box:nope"), "box:nope", "no such source")
	wantUsage(t, runFerry(t, nil, "session", "verify", "--repair", "box"), "SANDBOX:DIR")

	r = runFerry(t, nil, "--mode", mode, "session", "verify", "--repair", "box:sess")
	if r.code != 0 || !strings.Contains(r.stderr, "restored 2 of 2 missing chunk(s) from box:sess") || !strings.Contains(r.stderr, "ok:") {
		t.Fatalf("verify --repair: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, c := range chunks[:2] {
		if _, err := os.Stat(c); err != nil {
			t.Errorf("after the repair: %v", err)
		}
	}
	wantOK(t, runFerry(t, nil, "-q", "--mode", mode, "session", "restore", "task-1", "box:restored"))
	transfertest.EqualTrees(t, src, filepath.Join(g.Root, "box", "restored"))

	// With --json: the count, and what is still missing once the
	// directory has changed so that a lost chunk is in no file any more.
	if err := os.Remove(chunks[2]); err != nil {
		t.Fatal(err)
	}
	r = runFerry(t, nil, "--json", "--mode", mode, "session", "verify", "--repair", "box:restored")
	wantOK(t, r)
	m := decode(t, r.stdout, "snapshots", "missing", "repaired", "repair")
	if still, _ := m["missing"].([]any); m["repaired"] != float64(1) || len(still) != 0 {
		t.Errorf("verify --repair --json: %s", r.stdout)
	}
	if err := os.Remove(chunks[3]); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(g.Root, "box", "restored")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(g.Root, "box", "restored"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = runFerry(t, nil, "--mode", mode, "session", "verify", "--repair", "box:restored")
	if r.code != 1 || !strings.Contains(r.stderr, "restored 0 of 1 missing chunk(s) from box:restored") || !strings.Contains(r.stdout, "missing chunk "+filepath.Base(chunks[3])) {
		t.Errorf("verify --repair from a directory without the chunk: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestSessionRepairS3CLI: a pack lost from an S3 store (versitygw) is
// written again as a new pack by verify --repair, the lost pack's index
// object goes, and the whole store verifies clean and restores.
func TestSessionRepairS3CLI(t *testing.T) {
	s3 := s3test.Start(t)
	g, src, _ := sessionBox(t, 23, transfertest.TreeOptions{Entries: 40, BigFiles: 2, BigFileSize: 3 << 20})
	// The chunk cache would keep the pack this test loses.
	t.Setenv("FERRY_CACHE_DIR", "off")
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	t.Setenv("AWS_REGION", s3.Region)
	store := []string{"--store", "s3://" + s3.Bucket + "/ferry", "--s3-endpoint", s3.Endpoint}
	wantOK(t, runFerry(t, nil, append(store, "-q", "session", "save", "box:sess", "task-1")...))

	packs := s3.Keys(t, s3.Bucket, "ferry/packs/")
	if len(packs) < 2 {
		t.Fatalf("packs %v: want 2 or more", packs)
	}
	s3.Remove(t, s3.Bucket, packs[0])
	r := runFerry(t, nil, append(store, "session", "verify")...)
	if r.code != 1 || !strings.Contains(r.stdout, "missing chunk ") {
		t.Fatalf("verify without a pack: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	wantFailure(t, runFerry(t, nil, append(store, "session", "restore", "task-1", "box:early")...), "missing")
	r = runFerry(t, nil, append(store, "session", "verify", "--repair", "box:sess")...)
	if r.code != 0 || !strings.Contains(r.stderr, "restored ") || !strings.Contains(r.stderr, "ok:") {
		t.Fatalf("verify --repair: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	now := s3.Keys(t, s3.Bucket, "ferry/packs/")
	lostIndex := "index/" + filepath.Base(packs[0])
	switch {
	case slices.Contains(now, packs[0]):
		// The same chunks in the same order make the same pack: it is
		// back under its name, which is a repair too.
		t.Logf("the lost pack %s was written again whole", packs[0])
	case len(now) < len(packs) || slices.ContainsFunc(packs[1:], func(p string) bool { return !slices.Contains(now, p) }):
		// The lost chunks may come back in another order, so that they
		// fill one pack or spill into a second; the packs that were
		// not lost stay as they were.
		t.Errorf("packs after the repair %v, before %v: want new packs for the lost one, the others kept", now, packs)
	case !strings.Contains(r.stderr, "removed "+lostIndex) || slices.Contains(s3.Keys(t, s3.Bucket, "ferry/index/"), "ferry/"+lostIndex):
		t.Errorf("verify --repair did not remove %s: stderr %q", lostIndex, r.stderr)
	}
	if r := runFerry(t, nil, append(store, "session", "verify")...); r.code != 0 {
		t.Fatalf("verify after the repair: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	wantOK(t, runFerry(t, nil, append(store, "-q", "session", "restore", "task-1", "box:restored")...))
	transfertest.EqualTrees(t, src, filepath.Join(g.Root, "box", "restored"))
}
