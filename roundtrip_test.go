package ferry_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// TestRoundTripRandomTrees sends random trees into a sandbox and back
// through the real path (library → gateway → sandbox's tar → back) and
// requires them identical: content, modes, symlinks (dangling ones too),
// empty dirs, unicode and long names, nanosecond mtimes. Big files are
// scaled down here; `make bench` moves the large ones.
func TestRoundTripRandomTrees(t *testing.T) { forModes(t, testRoundTripRandomTrees) }

func testRoundTripRandomTrees(t *testing.T, mode variant) {
	e := newEnvVia(t, mode)
	for seed := int64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "src")
			if err := os.Mkdir(src, 0o755); err != nil {
				t.Fatal(err)
			}
			opts := transfertest.TreeOptions{}
			if seed == 4 {
				opts.BigFiles, opts.BigFileSize = 2, 8<<20
			}
			want := transfertest.RandomTree(t, src, seed, opts)
			remote := fmt.Sprintf("rt-%d", seed)
			up, err := ferry.Upload(ctx(t), e.sb, []string{src}, remote)
			if err != nil {
				t.Fatal(err)
			}
			if up.Files != want.Files || up.Dirs != want.Dirs || up.Symlinks != want.Symlinks || up.Bytes != want.Bytes {
				t.Fatalf("upload stats %+v, tree %+v", up, want)
			}
			back := filepath.Join(t.TempDir(), "back")
			down, err := ferry.Download(ctx(t), e.sb, []string{remote}, back, archive.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if down.Files != want.Files || down.Bytes != want.Bytes {
				t.Fatalf("download stats %+v, tree %+v", down, want)
			}
			// GNU tar in the sandbox, PAX format on the way back: exact to
			// the nanosecond.
			transfertest.EqualTrees(t, src, back)
		})
	}
}
