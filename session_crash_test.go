package ferry_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// crashTree writes a session directory at dir: base (the same bytes every
// round, so already in the store after the first save) and fresh, new
// incompressible bytes of round, so that every save has chunks to move.
func crashTree(t *testing.T, dir string, round int, base, fresh int) {
	t.Helper()
	files := map[string]string{"e/": "", "log/t.jsonl": fmt.Sprintf("{\"round\":%d}\n", round)}
	b := rand.New(rand.NewChaCha8([32]byte{1}))
	for i := 0; i < 4; i++ {
		files[fmt.Sprintf("base/b%d", i)] = noise(b, base/4)
	}
	f := rand.New(rand.NewChaCha8([32]byte{2, byte(round)}))
	for i := 0; i < 2; i++ {
		files[fmt.Sprintf("new/r%d-%d", round, i)] = noise(f, fresh/2)
	}
	write(t, dir, files)
}

// restoreLocal restores snapshot seq of key into a fresh local directory
// and checks it against want (content, modes, mtimes).
func restoreLocal(t *testing.T, st *session.Store, key string, seq int64, want string) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "restored")
	m, err := st.Restore(ctx(t), key, dst, session.RestoreOptions{Seq: seq})
	if err != nil {
		t.Fatalf("restore snapshot %d of %s: %v", seq, key, err)
	}
	if m.Seq != seq {
		t.Fatalf("restored snapshot %d, want %d", m.Seq, seq)
	}
	transfertest.EqualTrees(t, want, dst)
}

// verifyOK fails t unless the whole store verifies clean.
func verifyOK(t *testing.T, st *session.Store, what string) {
	t.Helper()
	rep, err := st.Verify(ctx(t), "")
	if err != nil {
		t.Fatalf("%s: verify: %v", what, err)
	}
	if !rep.OK() {
		t.Fatalf("%s: verify: missing %v corrupt %v broken %+v", what, rep.Missing, rep.Corrupt, rep.Broken)
	}
}

// TestSessionSaveCutMidSave is issue 5's relay cut in the middle of a
// save, through the embedded gateway's fault hook (CutAfter): the save
// fails with an error wrapping relay.ErrRelayLost, commits nothing, the
// store verifies, the previous snapshot restores byte-identical (to local
// disk and, once, through the gateway), and a retry through an uncut
// gateway commits a snapshot that restores byte-identical. Each cut falls
// inside the bytes the save must move: fewer than the new, incompressible
// bytes of the round (agent mode moves only the chunks the store lacks).
func TestSessionSaveCutMidSave(t *testing.T) { forModes(t, testSessionSaveCutMidSave) }

func testSessionSaveCutMidSave(t *testing.T, mode variant) {
	const base, fresh = 256 << 10, 1 << 20
	const key = "cut-key"
	// g0 is the uncut gateway: the first save, the retries, the restore
	// through the relay. Each round's source is its own directory there,
	// kept unchanged, to compare restores with.
	g0 := gatewaytest.Start(t, gatewaytest.Options{})
	c0 := g0.Client(t, openshell.Config{})
	g0.Sandbox(t, c0, "box")
	sb0 := sandboxVia(t, c0, mode)
	box0 := filepath.Join(g0.Root, "box")
	st, _ := newStore(t, nil)

	crashTree(t, filepath.Join(box0, "r0"), 0, base, fresh)
	// A cut during the first save of a key: nothing committed, the store
	// verifies; the retry below is the first snapshot.
	t.Run("first", func(t *testing.T) {
		gc := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{CutAfter: fresh / 2}})
		cc := gc.Client(t, openshell.Config{})
		gc.Sandbox(t, cc, "box")
		crashTree(t, filepath.Join(gc.Root, "box", "r0"), 0, base, fresh)
		_, err := ferry.SaveSession(ctx(t), sandboxVia(t, cc, mode), st, session.SaveSpec{Dir: "r0", Key: key})
		if !errors.Is(err, relay.ErrRelayLost) {
			t.Fatalf("first save cut: err = %v, want one wrapping relay.ErrRelayLost", err)
		}
		if _, err := st.Load(ctx(t), key, 0); !errors.Is(err, session.ErrNoSnapshot) {
			t.Fatalf("after a cut first save: load err = %v, want ErrNoSnapshot", err)
		}
		verifyOK(t, st, "after a cut first save")
	})
	if _, err := ferry.SaveSession(ctx(t), sb0, st, session.SaveSpec{Dir: "r0", Key: key}); err != nil {
		t.Fatal(err)
	}
	prev := int64(1)
	rng := rand.New(rand.NewPCG(5, 6))
	for round := 1; round <= 4; round++ {
		cut := int64(1 + rng.IntN(fresh))
		dir := fmt.Sprintf("r%d", round)
		t.Run(fmt.Sprintf("cut%d", cut), func(t *testing.T) {
			gc := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{CutAfter: cut}})
			cc := gc.Client(t, openshell.Config{})
			gc.Sandbox(t, cc, "box")
			crashTree(t, filepath.Join(gc.Root, "box", dir), round, base, fresh)
			_, err := ferry.SaveSession(ctx(t), sandboxVia(t, cc, mode), st, session.SaveSpec{Dir: dir, Key: key})
			if !errors.Is(err, relay.ErrRelayLost) {
				t.Fatalf("save cut after %d bytes: err = %v, want one wrapping relay.ErrRelayLost", cut, err)
			}
			list, err := st.List(ctx(t), key)
			if err != nil || len(list) != int(prev) || list[len(list)-1].Seq != prev {
				t.Fatalf("after the cut save: snapshots %+v, %v; want 1..%d", list, err, prev)
			}
			verifyOK(t, st, fmt.Sprintf("after a cut after %d bytes", cut))
			prevDir := filepath.Join(box0, fmt.Sprintf("r%d", prev-1))
			restoreLocal(t, st, key, prev, prevDir)
			if round == 1 {
				back := fmt.Sprintf("back%d", round)
				if _, err := ferry.RestoreSession(ctx(t), sb0, st, session.RestoreSpec{Key: key, Dir: back, Seq: prev}); err != nil {
					t.Fatalf("restore through the gateway after the cut: %v", err)
				}
				transfertest.EqualTrees(t, prevDir, filepath.Join(box0, back))
			}

			// The retry, through the uncut gateway, of the same tree.
			crashTree(t, filepath.Join(box0, dir), round, base, fresh)
			res, err := ferry.SaveSession(ctx(t), sb0, st, session.SaveSpec{Dir: dir, Key: key})
			if err != nil {
				t.Fatalf("retry after the cut: %v", err)
			}
			if res.Snapshot != prev+1 {
				t.Fatalf("retry: %+v, want snapshot %d", res, prev+1)
			}
			prev = res.Snapshot
			verifyOK(t, st, "after the retry")
			restoreLocal(t, st, key, prev, filepath.Join(box0, dir))
		})
		if t.Failed() {
			return
		}
	}
}
