package main

import (
	"bytes"
	"context"
	"encoding/gob"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/session/s3store"
	"github.com/ferry-dev/ferry/session/s3store/s3test"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// Bounds of TestSessionPruneRace: at least minRaceRounds rounds, and more
// until a prune has met a save in flight and one has removed a chunk or
// pack (on S3 a pack goes only once none of its chunks is referenced),
// up to maxRaceRounds.
const (
	minRaceRounds = 4
	maxRaceRounds = 20
)

// TestSessionPruneRace is issue 20's operator: a cron prune (--older-than
// a second, as Rascal's session TTL; --keep 1) runs while two nodes save
// sessions, each through its own gateway and sandbox, into one store: a
// directory and an S3 bucket (versitygw). Every round changes each
// node's session a little (the bulk of it stays, so each save reuses the
// chunks of the snapshot it starts from), runs both saves and two prunes
// at once, and then restores every snapshot the store lists and compares
// it byte for byte with the tree that was saved as it. The prunes run
// with a grace period of a millisecond, so that only the store's locks
// keep a save's reused chunks; the test asserts that a prune did meet a
// save in flight (it reports the snapshot it kept for it) at least once,
// and that one removed chunks. In odd rounds the prunes start once both
// saves hold their locks, at a random point of them (a save in flight for
// certain); in every fourth they start after both saves, so that they
// remove what no snapshot they keep holds (a prune that meets a save
// removes no chunk); in the others at a random delay from the saves'
// start, which may fall before a save's lock or after its commit.
func TestSessionPruneRace(t *testing.T) {
	xdg := isolate(t)
	bundle := filepath.Join(xdg, "bundle.gob")
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(agenttest.Bundle(t)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, bundle, buf.Bytes(), 0o600)
	// The two stores' runs share nothing but this process's environment,
	// which neither changes: they overlap, each mostly waiting on its
	// nodes and its rounds' second.
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "store")
		b, err := local.NewDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		testPruneRace(t, bundle, nil, []string{"--store", dir}, b)
	})
	t.Run("s3", func(t *testing.T) {
		t.Parallel()
		s3 := s3test.Start(t)
		env := []string{"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey, "AWS_REGION=" + s3.Region}
		const prefix = "prune-race"
		b, err := s3store.New(context.Background(), s3store.Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Prefix: prefix,
			Region: s3.Region, AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey})
		if err != nil {
			t.Fatal(err)
		}
		testPruneRace(t, bundle, env, []string{"--store", "s3://" + s3.Bucket + "/" + prefix, "--s3-endpoint", s3.Endpoint}, b)
	})
}

// pruneJSON is what the test reads of `ferry --json session prune`.
type pruneJSON struct {
	Snapshots     []session.SnapshotRef `json:"snapshots"`
	Chunks        int                   `json:"chunks"`
	Packs         int                   `json:"packs"`
	Deferred      []session.SnapshotRef `json:"deferred"`
	SavesInFlight int                   `json:"saves_in_flight"`
}

func testPruneRace(t *testing.T, bundle string, env, store []string, b session.Backend) {
	ctx := context.Background()
	st, err := session.New(session.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*node{newNode(t, "a", bundle, env, store), newNode(t, "b", bundle, env, store)}
	keys := []string{"race-a", "race-b"}
	for i, n := range nodes {
		sess := filepath.Join(n.gw.Root, "box", "sess")
		if err := os.MkdirAll(filepath.Join(sess, "bulk"), 0o755); err != nil {
			t.Fatal(err)
		}
		transfertest.RandomTree(t, filepath.Join(sess, "bulk"), int64(40+i), transfertest.TreeOptions{Entries: 60, BigFiles: 2, BigFileSize: 1 << 20})
	}
	saved := map[session.SnapshotRef]string{} // snapshot -> a copy of the tree saved as it
	rnd := rand.New(rand.NewPCG(20, 20))
	var deferred, removedChunks, savesSeen, rounds int
	for round := 1; round <= maxRaceRounds && (round <= minRaceRounds || deferred == 0 || removedChunks == 0); round++ {
		rounds = round
		// The session changes a little: a transcript grows, a file is new.
		copies := make([]string, len(nodes))
		for i, n := range nodes {
			sess := filepath.Join(n.gw.Root, "box", "sess")
			f, err := os.OpenFile(filepath.Join(sess, "t.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(f, "{\"round\":%d,\"node\":%q,\"pad\":%q}\n", round, n.name, strings.Repeat("x", rnd.IntN(4096)))
			f.Close()
			// New data for the save to fetch and store, in place of the
			// last round's: the session keeps its size, and the chunks of
			// the file it drops are the prunes' to remove once no kept
			// snapshot holds them.
			fresh := make([]byte, 1<<20+rnd.IntN(1<<20))
			for j := range fresh {
				fresh[j] = byte(rnd.Uint32())
			}
			if err := os.Remove(filepath.Join(sess, fmt.Sprintf("r%d", round-1))); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(sess, fmt.Sprintf("r%d", round)), fresh, 0o644)
			copies[i] = filepath.Join(t.TempDir(), "saved")
			if out, err := exec.Command("cp", "-a", sess, copies[i]).CombinedOutput(); err != nil {
				t.Fatalf("copy %s: %v: %s", sess, err, out)
			}
		}
		// Both saves and both prunes at once; the prunes a little later,
		// by a random delay, so that rounds try every part of a save.
		var wg sync.WaitGroup
		saves := make([]nodeResult, len(nodes))
		prunes := make([]nodeResult, len(nodes))
		savesDone := make(chan struct{})
		var saving sync.WaitGroup
		for i, n := range nodes {
			saving.Go(func() { saves[i] = n.run(t, "--json", "session", "save", "box:sess", keys[i]) })
		}
		go func() { saving.Wait(); close(savesDone) }()
		var locked bool
		switch {
		case round%2 == 1:
			locked = waitSaveLocks(t, b, len(nodes), savesDone)
		case round%4 == 0:
			<-savesDone
		}
		for i, n := range nodes {
			opt := []string{"--older-than", "1s"}
			if (i+round)%2 == 0 {
				opt = []string{"--keep", "1"}
			}
			delay := time.Duration(rnd.IntN(400)) * time.Millisecond
			if locked {
				delay /= 4
			}
			wg.Go(func() {
				time.Sleep(delay)
				prunes[i] = n.run(t, append([]string{"--json", "session", "prune", "--grace", "1ms"}, opt...)...)
			})
		}
		wg.Wait()
		<-savesDone
		for i, r := range saves {
			if r.code != 0 {
				t.Fatalf("round %d: node %s: save: exit %d, stderr %q", round, nodes[i].name, r.code, r.stderr)
			}
			var res struct {
				Snapshot int64 `json:"snapshot"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Snapshot == 0 {
				t.Fatalf("round %d: node %s: save printed %q: %v", round, nodes[i].name, r.stdout, err)
			}
			saved[session.SnapshotRef{Key: keys[i], Seq: res.Snapshot}] = copies[i]
		}
		for i, r := range prunes {
			var rep pruneJSON
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil {
				t.Fatalf("round %d: node %s: prune: exit %d, stdout %q, stderr %q", round, nodes[i].name, r.code, r.stdout, r.stderr)
			}
			deferred += len(rep.Deferred)
			removedChunks += rep.Chunks + rep.Packs
			savesSeen += rep.SavesInFlight
		}
		// Every snapshot the store lists restores to what was saved.
		list, err := st.List(ctx, "")
		if err != nil {
			t.Fatalf("round %d: list: %v", round, err)
		}
		if len(list) == 0 {
			t.Fatalf("round %d: the store lists no snapshot", round)
		}
		for _, info := range list {
			ref := session.SnapshotRef{Key: info.Key, Seq: info.Seq}
			want, ok := saved[ref]
			if !ok {
				t.Fatalf("round %d: the store lists %s, which no save reported", round, ref)
			}
			dst := filepath.Join(t.TempDir(), "restored")
			if _, err := st.Restore(ctx, ref.Key, dst, session.RestoreOptions{Seq: ref.Seq}); err != nil {
				t.Fatalf("round %d: restore %s: %v", round, ref, err)
			}
			transfertest.EqualTrees(t, want, dst)
		}
		// The snapshots of this round are past --older-than in the next.
		time.Sleep(time.Second)
	}
	t.Logf("%d rounds: %d snapshot(s) kept for a save in flight, %d prune(s) saw a save in flight, %d chunk or pack object(s) removed", rounds, deferred, savesSeen, removedChunks)
	if deferred == 0 {
		t.Fatalf("in %d rounds no prune met a save in flight: the race was not exercised", maxRaceRounds)
	}
	if removedChunks == 0 {
		t.Fatalf("in %d rounds no prune removed a chunk: the race could not have lost one", maxRaceRounds)
	}
	if r := nodes[0].run(t, "session", "verify"); r.code != 0 {
		t.Fatalf("verify after the rounds: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// waitSaveLocks waits until the store holds n save locks (the saves are
// in flight) and reports true, or reports false once the saves are done
// without that having been seen, or after nodeWait.
func waitSaveLocks(t *testing.T, b session.Backend, n int, done <-chan struct{}) bool {
	t.Helper()
	deadline := time.Now().Add(nodeWait)
	for time.Now().Before(deadline) {
		held := 0
		if err := b.List(context.Background(), "locks/save/", func(session.ObjectInfo) error { held++; return nil }); err != nil {
			t.Fatalf("list save locks: %v", err)
		}
		if held >= n {
			return true
		}
		select {
		case <-done:
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return false
}
