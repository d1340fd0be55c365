package ferry_test

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// TestRelayCutAtRandomOffsets cuts the exec stream (the gateway's fault
// hook) at random offsets of an upload and of a download: every cut must
// be an error wrapping relay.ErrRelayLost, and nothing may be left in place
// on either side.
func TestRelayCutAtRandomOffsets(t *testing.T) { forModes(t, testRelayCutAtRandomOffsets) }

func testRelayCutAtRandomOffsets(t *testing.T, mode variant) {
	local := t.TempDir()
	files := map[string]string{}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 40; i++ {
		files[filepath.Join("tree", "d"+string(rune('a'+i%5)), "f"+strings.Repeat("x", i%7)+string(rune('a'+i)))] = noise(rng, 1+rng.IntN(200<<10))
	}
	write(t, local, files)
	for i := 0; i < 6; i++ {
		cut := int64(1 + rng.IntN(3<<20))
		t.Run("", func(t *testing.T) {
			g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{CutAfter: cut}})
			c := g.Client(t, openshell.Config{})
			g.Sandbox(t, c, "box")
			sb := sandboxVia(t, c, mode)
			_, err := ferry.Upload(ctx(t), sb, []string{filepath.Join(local, "tree")}, "up")
			if !errors.Is(err, relay.ErrRelayLost) {
				t.Fatalf("upload cut after %d bytes: err = %v, want ErrRelayLost", cut, err)
			}
			if _, err := os.Lstat(filepath.Join(g.Root, "box", "up")); !os.IsNotExist(err) {
				t.Fatalf("upload cut after %d bytes left %s in place (%v)", cut, "up", err)
			}
			// Nor a staging directory beside it: each mode removes its
			// own after a cut, through a new exec.
			ents, _ := os.ReadDir(filepath.Join(g.Root, "box"))
			for _, en := range ents {
				if strings.HasPrefix(en.Name(), ".ferry") {
					t.Fatalf("upload cut after %d bytes left %s", cut, en.Name())
				}
			}
			// The same tree placed in the sandbox directly, then fetched
			// through the cut relay.
			write(t, filepath.Join(g.Root, "box"), files)
			dst := filepath.Join(t.TempDir(), "down")
			_, err = ferry.Download(ctx(t), sb, []string{"tree"}, dst, archive.Limits{})
			if !errors.Is(err, relay.ErrRelayLost) {
				t.Fatalf("download cut after %d bytes: err = %v, want ErrRelayLost", cut, err)
			}
			if _, err := os.Lstat(dst); !os.IsNotExist(err) {
				t.Fatalf("download cut after %d bytes left %s in place (%v)", cut, dst, err)
			}
			if ents, _ := os.ReadDir(filepath.Dir(dst)); len(ents) != 0 {
				t.Fatalf("download cut after %d bytes left %v beside the destination", cut, ents)
			}
		})
	}
}

// noise is n incompressible bytes: agent mode compresses, and a cut must
// still fall inside the transfer.
func noise(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return string(b)
}
