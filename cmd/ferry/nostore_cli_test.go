package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/s3store"
	"github.com/ferry-dev/ferry/session/s3store/s3test"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// readOnlyStoreCmds are the session commands that must not create the
// store they are given: each fails on a missing one.
var readOnlyStoreCmds = [][]string{
	{"session", "list"},
	{"session", "list", "task-1"},
	{"--json", "session", "list"},
	{"session", "verify"},
	{"session", "verify", "task-1"},
	{"session", "verify", "--repair-index"},
	{"session", "prune"},
	{"--json", "session", "prune", "--keep", "1", "--older-than", "1h"},
	{"session", "restore", "task-1", "box:x"},
	{"session", "restore", "--snapshot", "1", "--allow-missing", "task-1", "box:x"},
}

// TestSessionMissingStoreCLI is issue 20's read-only commands on a store
// directory that does not exist: each exits 1 with one line naming the
// directory, and leaves it missing; with no --store and no $FERRY_STORE
// the default location is the one named. `restore --allow-missing`
// restores nothing and succeeds, without creating the store (a node's
// first run), and `save` and `run --session` create it.
func TestSessionMissingStoreCLI(t *testing.T) {
	g := activeGateway(t)
	wantOK(t, runFerry(t, nil, "sandbox", "create", "box", "-q"))
	missing := filepath.Join(t.TempDir(), "no", "store")
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	t.Setenv("FERRY_STORE", "")
	def := filepath.Join(state, "ferry")
	for _, tc := range []struct {
		name  string
		store []string // flags
		dir   string   // what the message names
	}{
		{"--store", []string{"--store", missing}, missing},
		{"FERRY_STORE", nil, missing},
		{"default", nil, def},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "FERRY_STORE" {
				t.Setenv("FERRY_STORE", missing)
			}
			for _, args := range readOnlyStoreCmds {
				r := runFerry(t, nil, append(append([]string{}, tc.store...), args...)...)
				wantFailure(t, r, "session store "+tc.dir+" does not exist")
				if t.Failed() {
					t.Fatalf("ferry %q", args)
				}
				if _, err := os.Lstat(tc.dir); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("ferry %q created the store %s (%v)", args, tc.dir, err)
				}
			}
			// A node's first run: nothing to restore, and no store made.
			r := runFerry(t, nil, append(append([]string{}, tc.store...), "--json", "session", "restore", "--allow-missing", "task-1", "box:x")...)
			wantOK(t, r)
			if m := decode(t, r.stdout, "missing"); m["missing"] != true {
				t.Errorf("restore --allow-missing: %s", r.stdout)
			}
			if _, err := os.Lstat(tc.dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("restore --allow-missing created the store %s (%v)", tc.dir, err)
			}
			if _, err := os.Lstat(filepath.Join(g.Root, "box", "x")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("restore --allow-missing wrote the target: %v", err)
			}
		})
	}

	// save creates the store; then the read-only commands work on it.
	src := filepath.Join(g.Root, "box", "sess")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	transfertest.RandomTree(t, src, 40, transfertest.TreeOptions{Entries: 20})
	wantOK(t, runFerry(t, nil, "-q", "--store", missing, "session", "save", "box:sess", "task-1"))
	if fi, err := os.Stat(missing); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the store save created: %v, %v; want a 0700 directory", fi, err)
	}
	if r := runFerry(t, nil, "--store", missing, "session", "list", "task-1"); r.code != 0 || !strings.Contains(r.stdout, "task-1") {
		t.Fatalf("list after the save: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if r := runFerry(t, nil, "--store", missing, "session", "verify"); r.code != 0 || !strings.Contains(r.stderr, "ok: 1 snapshots") {
		t.Fatalf("verify after the save: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}

	// Rascal's first run on a fresh machine: `run --session` with no store
	// yet restores nothing, runs, and saves the first snapshot.
	fresh := filepath.Join(t.TempDir(), "fresh", "store")
	out := filepath.Join(t.TempDir(), "run")
	r := runFerry(t, nil, "-q", "--store", fresh, "run", "box", "--session", "task-9:s9", "--out", out, "--",
		"sh", "-c", `mkdir -p rascal-meta s9; echo one > s9/t; echo '{"exit_code":0}' > rascal-meta/meta.json`)
	if r.code != 0 {
		t.Fatalf("run --session on a fresh machine: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runFerry(t, nil, "--json", "--store", fresh, "session", "list", "task-9"); r.code != 0 || !strings.Contains(r.stdout, `"seq":1`) {
		t.Fatalf("list after the first run: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
}

// TestSessionMissingBucketCLI: the same commands on an S3 store whose
// bucket does not exist, save and run --session included (ferry creates
// no bucket), and restore --allow-missing too (a save at the end of the
// run would fail): each exits 1 naming the store and the bucket, and the
// bucket is still missing afterwards.
func TestSessionMissingBucketCLI(t *testing.T) {
	isolate(t)
	s3 := s3test.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	t.Setenv("AWS_REGION", s3.Region)
	const bucket = "ferry-no-such-bucket"
	loc := "s3://" + bucket + "/sessions"
	store := []string{"--store", loc, "--s3-endpoint", s3.Endpoint}
	cmds := append(append([][]string{}, readOnlyStoreCmds...),
		[]string{"session", "restore", "--allow-missing", "task-1", "box:x"},
		[]string{"session", "save", "box:sess", "task-1"},
		[]string{"run", "box", "--session", "task-1:sess", "--", "true"},
	)
	for _, args := range cmds {
		r := runFerry(t, nil, append(append([]string{}, store...), args...)...)
		wantFailure(t, r, "session store "+loc+" does not exist", "no bucket "+bucket+" at "+s3.Endpoint)
		if t.Failed() {
			t.Fatalf("ferry %q", args)
		}
	}
	_, err := s3store.New(context.Background(), s3store.Config{Endpoint: s3.Endpoint, Bucket: bucket, Prefix: "sessions",
		Region: s3.Region, AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey})
	if !errors.Is(err, session.ErrNoStore) || !strings.Contains(err.Error(), bucket) {
		t.Fatalf("open the bucket afterwards: %v; want it still missing (session.ErrNoStore, naming it)", err)
	}
}
