//go:build unix

package archive_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// gateReader hands out data up to at bytes, then signals staged and
// blocks until release is closed (or fails with its error).
type gateReader struct {
	r       io.Reader
	at      int
	staged  chan struct{}
	release chan error
	once    sync.Once
}

func newGate(data []byte, at int) *gateReader {
	return &gateReader{r: bytes.NewReader(data), at: at, staged: make(chan struct{}), release: make(chan error, 1)}
}

func (g *gateReader) Read(p []byte) (int, error) {
	if g.at <= 0 {
		g.once.Do(func() { close(g.staged) })
		if err := <-g.release; err != nil {
			g.release <- err
			return 0, err
		}
		g.release <- nil
		g.at = 1 << 62
	}
	if len(p) > g.at {
		p = p[:g.at]
	}
	n, err := g.r.Read(p)
	g.at -= n
	return n, err
}

// stagingIn lists the staging directories in dir.
func stagingIn(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, n := range names(t, dir) {
		if strings.HasPrefix(n, archive.StagingPrefix) {
			out = append(out, n)
		}
	}
	return out
}

// stageChild is the child of TestStaleStagingAfterKill: an Extract that
// stages into FERRY_STAGE_CHILD, says so on stdout and then waits for a
// stream that never goes on, until the parent kills it.
func stageChild() {
	parent := os.Getenv("FERRY_STAGE_CHILD")
	g := newGate(newBuilder().file("a", strings.Repeat("a", 4096)).file("b", "b").end(), 1024)
	go func() {
		<-g.staged
		fmt.Println("staged")
	}()
	archive.Extract(context.Background(), g, filepath.Join(parent, "dest"), archive.ExtractOptions{})
	os.Exit(3)
}

// TestStaleStagingAfterKill: an Extract killed with SIGKILL (no cleanup
// of its own can run) leaves its staging directory; the next Extract
// into the same directory removes it, says how many, and places its tree.
func TestStaleStagingAfterKill(t *testing.T) {
	if os.Getenv("FERRY_STAGE_CHILD") != "" {
		stageChild()
	}
	parent := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStaleStagingAfterKill$")
	cmd.Env = append(os.Environ(), "FERRY_STAGE_CHILD="+parent)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "staged\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q", line)
	}
	cmd.Process.Kill()
	cmd.Wait()
	left := stagingIn(t, parent)
	if len(left) != 1 {
		t.Fatalf("the killed Extract left %v, want one staging directory", left)
	}
	lock, err := os.ReadFile(filepath.Join(parent, left[0], "lock"))
	if err != nil || !strings.Contains(string(lock), fmt.Sprintf("pid %d\n", cmd.Process.Pid)) {
		t.Fatalf("marker %q (%v), want the child's pid", lock, err)
	}
	var removed []int
	_, err = extract(t, newBuilder().file("x", "x").end(), filepath.Join(parent, "next"), archive.ExtractOptions{
		OnStale: func(n int, err error) {
			if err != nil {
				t.Errorf("sweep: %v", err)
			}
			removed = append(removed, n)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []int{1}) {
		t.Errorf("OnStale told %v, want [1]", removed)
	}
	if got := names(t, parent); !slices.Equal(got, []string{"next"}) {
		t.Fatalf("after the next Extract the directory holds %q, want [next]", got)
	}
}

// TestStaleStagingSparesLive: Extracts staging concurrently in one
// directory never remove each other's staging, stale ones among them go,
// and every one places its tree.
func TestStaleStagingSparesLive(t *testing.T) {
	parent := t.TempDir()
	stale := filepath.Join(parent, archive.StagingPrefix+"0123456789abcdef")
	mustWrite(t, filepath.Join(stale, "lock"), "ferry staging directory\npid 1\n")
	mustWrite(t, filepath.Join(stale, "tree", "half"), "half-written")
	const n = 6
	gates := make([]*gateReader, n)
	errs := make([]error, n)
	swept := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		gates[i] = newGate(newBuilder().file(fmt.Sprint("f", i), strings.Repeat("x", 2048)).end(), 700)
		wg.Go(func() {
			_, errs[i] = archive.Extract(context.Background(), gates[i], filepath.Join(parent, fmt.Sprint("dest", i)), archive.ExtractOptions{
				OnStale: func(k int, err error) { swept[i] = k },
			})
		})
		// The next one starts only once this one is live, so that each
		// later sweep meets every earlier staging directory.
		select {
		case <-gates[i].staged:
		case <-time.After(10 * time.Second):
			t.Fatalf("Extract %d never staged", i)
		}
	}
	if live := stagingIn(t, parent); len(live) != n {
		t.Errorf("with %d Extracts live, %d staging directories: %v", n, len(live), live)
	}
	for _, g := range gates {
		g.release <- nil
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Extract %d: %v", i, err)
		}
		if b, err := os.ReadFile(filepath.Join(parent, fmt.Sprint("dest", i), fmt.Sprint("f", i))); err != nil || len(b) != 2048 {
			t.Errorf("Extract %d placed %d bytes, %v", i, len(b), err)
		}
	}
	if !slices.Equal(swept, []int{1, 0, 0, 0, 0, 0}) {
		t.Errorf("removed %v, want the stale one, by the first", swept)
	}
	if left := stagingIn(t, parent); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}

// TestStaleStagingLookalikes: only what is provably a stale staging
// directory is removed; a name, a type or a marker that is not ferry's
// is left alone, and no symlink is followed.
func TestStaleStagingLookalikes(t *testing.T) {
	parent := t.TempDir()
	outside := t.TempDir()
	old := time.Now().Add(-2 * time.Hour)
	p := func(s string) string { return filepath.Join(parent, archive.StagingPrefix+s) }
	marker := "ferry staging directory\npid 1\n"
	// Gone: a marked one nobody holds; an unmarked one, old, with only
	// what a staging directory holds; an empty old one.
	mustWrite(t, filepath.Join(p("aa01"), "lock"), marker)
	mustWrite(t, filepath.Join(p("aa02"), "tree", "f"), "f")
	if err := os.Mkdir(p("aa03"), 0o700); err != nil {
		t.Fatal(err)
	}
	// Kept.
	mustWrite(t, filepath.Join(p("notes"), "lock"), marker)     // not hex
	mustWrite(t, filepath.Join(p("AB01"), "lock"), marker)      // upper case
	mustWrite(t, filepath.Join(p("ab02"), "lock"), "mine\n")    // a marker that is not ferry's
	mustWrite(t, filepath.Join(p("ab03"), "tree", "f"), "f")    // unmarked, young
	mustWrite(t, filepath.Join(p("ab04"), "tree", "f"), "f")    // unmarked, old, holding more
	mustWrite(t, filepath.Join(p("ab04"), "notes.txt"), "mine") //
	mustWrite(t, p("ab05"), "a file")                           // not a directory
	mustWrite(t, filepath.Join(outside, "victim", "lock"), marker)
	if err := os.Symlink(filepath.Join(outside, "victim"), p("ab06")); err != nil { // a symlink to a stale-looking one
		t.Fatal(err)
	}
	if err := os.Mkdir(p("ab07"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "victim", "lock"), filepath.Join(p("ab07"), "lock")); err != nil { // a marker through a symlink
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(parent, ".ferry-up-cc04", "pid"), "1\n") // POSIX mode's, not Extract's
	// Under a first name: gone when its pid is (one this test ran and
	// reaped), kept while it lives or when the pid is not one.
	dead := transfertest.DeadPID(t)
	mustWrite(t, filepath.Join(p("aa05."+strconv.Itoa(dead)), "lock"), "")       // killed before it wrote its marker
	mustWrite(t, filepath.Join(p("ab11."+strconv.Itoa(dead)), "tree", "f"), "f") // holding what no first name holds
	mustWrite(t, filepath.Join(p("ab08."+strconv.Itoa(os.Getpid())), "lock"), marker)
	mustWrite(t, filepath.Join(p("ab09.0x1"), "lock"), marker)
	mustWrite(t, filepath.Join(p("ab10.0"+strconv.Itoa(dead)), "lock"), marker)
	mustWrite(t, filepath.Join(p("zz11."+strconv.Itoa(dead)), "lock"), marker)
	for _, d := range []string{"aa02", "aa03", "ab04", "ab07"} {
		if err := os.Chtimes(p(d), old, old); err != nil {
			t.Fatal(err)
		}
	}
	before := names(t, parent)
	n, err := archive.RemoveStaleStaging(context.Background(), parent)
	if err != nil || n != 4 {
		t.Fatalf("RemoveStaleStaging = %d, %v; want 4", n, err)
	}
	var want []string
	for _, name := range before {
		if !strings.Contains(name, "-aa0") {
			want = append(want, name)
		}
	}
	if got := names(t, parent); !slices.Equal(got, want) {
		t.Fatalf("left %q, want %q", got, want)
	}
	if got := names(t, filepath.Join(outside, "victim")); !slices.Equal(got, []string{"lock"}) {
		t.Fatalf("the symlink's target holds %q", got)
	}
}

// TestRemoveStagingWaits: RemoveStaging of a live staging directory waits
// for its owner, fails with ErrStagingBusy past its context, and succeeds
// once the owner has let go (here: finished and removed it itself); a
// stale one goes at once, and a name that is not a staging one is refused.
func TestRemoveStagingWaits(t *testing.T) {
	parent := t.TempDir()
	g := newGate(newBuilder().file("a", strings.Repeat("a", 2048)).end(), 700)
	done := make(chan error, 1)
	go func() {
		_, err := archive.Extract(context.Background(), g, filepath.Join(parent, "dest"), archive.ExtractOptions{Staging: archive.StagingPrefix + "00ff"})
		done <- err
	}()
	<-g.staged
	dir := filepath.Join(parent, archive.StagingPrefix+"00ff")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := archive.RemoveStaging(ctx, dir)
	cancel()
	if !errors.Is(err, archive.ErrStagingBusy) {
		t.Fatalf("RemoveStaging of a live one: %v, want ErrStagingBusy", err)
	}
	if _, err := os.Lstat(dir); err != nil {
		t.Fatalf("the live staging directory went: %v", err)
	}
	removed := make(chan error, 1)
	go func() { removed <- archive.RemoveStaging(context.Background(), dir) }()
	time.Sleep(50 * time.Millisecond)
	g.release <- errors.New("stream broke")
	if err := <-done; err == nil {
		t.Fatal("Extract of a broken stream succeeded")
	}
	if err := <-removed; err != nil {
		t.Fatalf("RemoveStaging once its owner let go: %v", err)
	}
	stale := filepath.Join(parent, archive.StagingPrefix+"0abc")
	mustWrite(t, filepath.Join(stale, "lock"), "ferry staging directory\n")
	// And what an owner killed before its rename left of the same name.
	mustWrite(t, filepath.Join(stale+"."+strconv.Itoa(transfertest.DeadPID(t)), "lock"), "ferry staging directory\n")
	if err := archive.RemoveStaging(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	if got := names(t, parent); len(got) != 0 {
		t.Fatalf("left %q", got)
	}
	if err := archive.RemoveStaging(context.Background(), filepath.Join(parent, "dest")); !errors.Is(err, archive.ErrUnsafePath) {
		t.Fatalf("RemoveStaging of a plain name: %v, want ErrUnsafePath", err)
	}
}
