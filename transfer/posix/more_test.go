package posix_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/transfer/posix"
)

// stallReader gives its bytes, then blocks until released.
type stallReader struct {
	r       io.Reader
	started chan struct{}
	once    sync.Once
	release chan struct{}
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if errors.Is(err, io.EOF) {
		s.once.Do(func() { close(s.started) })
		<-s.release
	}
	return n, err
}

// TestUploadCancel cancels an upload whose archive stalls half way: the
// context's error, the temp dir removed, dest not created.
func TestUploadCancel(t *testing.T) {
	b := gatewayBox(t, flavors[0], gateway.Config{}, "")
	arch := tarOf(t, true, sampleTree)
	sr := &stallReader{r: bytes.NewReader(arch[:len(arch)/2]), started: make(chan struct{}), release: make(chan struct{})}
	defer close(sr.release)
	ctx, cancel := context.WithCancel(ctxFor(t))
	go func() {
		<-sr.started
		// Let the half reach tar, so that the temp dir exists.
		time.Sleep(200 * time.Millisecond)
		cancel()
	}()
	_, err := b.r.Upload(ctx, sr, "new", posix.PlaceNew, -1)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if k, err := b.r.Stat(ctxFor(t), "new"); err != nil || k != posix.Missing {
		t.Fatalf("dest: %v, %v", k, err)
	}
	noLeftovers(t, b.dir)
}

// TestOneShot goes through a gateway without the streaming RPC, where the
// client falls back to one-shot exec (stdin in one message).
func TestOneShot(t *testing.T) {
	b := gatewayBox(t, flavors[0], gateway.Config{DisableInteractive: true}, "")
	if _, err := b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, true, sampleTree)), "t", posix.PlaceNew, int64(len(sampleTree))); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := b.r.Download(ctxFor(t), "t", []string{"."}, &out); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "one-shot", untar(t, out.Bytes()), wantTree(sampleTree))
}

// TestConcurrent runs uploads into one parent at once: none takes another's
// temp dir for a dead one.
func TestConcurrent(t *testing.T) {
	b := gatewayBox(t, flavors[0], gateway.Config{}, "")
	arch := tarOf(t, true, sampleTree)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = b.r.Upload(ctxFor(t), bytes.NewReader(arch), fmt.Sprintf("p/%d", i), posix.PlaceNew, int64(len(sampleTree)))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
		sameTree(t, "concurrent", tree(t, filepath.Join(b.dir, fmt.Sprintf("p/%d", i))), wantTree(sampleTree))
	}
	noLeftovers(t, b.dir)
}

// TestSweep: an upload removes temp dirs of earlier uploads whose script
// is gone (its pid, in the dir or in the name of one not yet renamed,
// dead; or an old dir without a pid), and says how many; it leaves those of live ones alone, and anything that is not one
// of Upload's temp dirs: another name, a symlink (never followed).
func TestSweep(t *testing.T) {
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) { testSweep(t, f) })
	}
}

func testSweep(t *testing.T, f flavor) {
	b := gatewayBox(t, f, gateway.Config{}, "")
	mk := func(name, pid string) string {
		d := filepath.Join(b.dir, "p", name)
		if err := os.MkdirAll(filepath.Join(d, "r"), 0o700); err != nil {
			t.Fatal(err)
		}
		if pid != "" {
			if err := os.WriteFile(filepath.Join(d, "pid"), []byte(pid+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	old := time.Now().Add(-10 * time.Minute)
	dead := mk(".ferry-up-0123", "999999999")
	// A dead one whose tree has a read-only directory in it.
	deadRO := mk(".ferry-up-0124", "999999998")
	if err := os.MkdirAll(filepath.Join(deadRO, "r", "ro", "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(deadRO, "r", "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	orphan := mk(".ferry-up-0125", "") // killed before its pid was written
	if err := os.Chtimes(orphan, old, old); err != nil {
		t.Fatal(err)
	}
	preDead := mk(".ferry-up-0126.999999997", "") // killed before its rename: the pid is in the name
	preLive := mk(".ferry-up-0127."+strconv.Itoa(os.Getpid()), "")
	twoDots := mk(".ferry-up-0128.1.2", "")
	if err := os.Chtimes(twoDots, old, old); err != nil {
		t.Fatal(err)
	}
	live := mk(".ferry-up-4567", strconv.Itoa(os.Getpid()))
	young := mk(".ferry-up-89ab", "") // made, pid not yet written
	other := mk(".ferry-other", "999999999")
	notHex := mk(".ferry-up-notes", "999999999")
	target := mk("elsewhere", "999999999")
	link := filepath.Join(b.dir, "p", ".ferry-up-cdef")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	res, err := b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, true, sampleTree)), "p/new", posix.PlaceNew, -1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Swept != 4 {
		t.Errorf("Swept = %d, want 4", res.Swept)
	}
	for _, d := range []string{dead, deadRO, orphan, preDead} {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s kept: %v", d, err)
		}
	}
	for _, d := range []string{live, preLive, twoDots, young, other, notHex, link, filepath.Join(target, "pid")} {
		if _, err := os.Lstat(d); err != nil {
			t.Errorf("%s swept: %v", d, err)
		}
	}
}

// TestCleanupBeforeRename: the host's cleanup after a failed upload also
// removes the temp dir of a script killed before it renamed it (TMP.PID,
// its pid dead), and nothing else beside it.
func TestCleanupBeforeRename(t *testing.T) {
	for _, sh := range [][]string{{"/bin/sh"}, {"/usr/bin/busybox", "sh"}} {
		t.Run(strings.Join(sh, " "), func(t *testing.T) {
			if _, err := os.Stat(sh[0]); err != nil {
				t.Skipf("no %s", sh[0])
			}
			dir := t.TempDir()
			tmp := filepath.Join(dir, ".ferry-up-00aa")
			for _, d := range []string{tmp + ".999999996/r", tmp + ".x/r", filepath.Join(dir, ".ferry-up-00ab.999999995")} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(tmp+".999999996/pid", []byte("999999996\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(sh[0], append(sh[1:], "-c", posix.Scripts["cleanup"], "sh", tmp)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("cleanup: %v\n%s", err, out)
			}
			var got []string
			des, _ := os.ReadDir(dir)
			for _, de := range des {
				got = append(got, de.Name())
			}
			if want := []string{".ferry-up-00aa.x", ".ferry-up-00ab.999999995"}; !slices.Equal(got, want) {
				t.Fatalf("left %q, want %q", got, want)
			}
		})
	}
}

// TestCleanupWaitsForAStart: with no temp dir to be seen, the cleanup
// gives an upload script that may not have begun half a second to make
// one, and removes the one it makes; told that the script said it had
// started (and so had its dir already, now gone), it does not wait.
func TestCleanupWaitsForAStart(t *testing.T) {
	for _, sh := range [][]string{{"/bin/sh"}, {"/usr/bin/busybox", "sh"}} {
		t.Run(strings.Join(sh, " "), func(t *testing.T) {
			if _, err := os.Stat(sh[0]); err != nil {
				t.Skipf("no %s", sh[0])
			}
			t.Run("late", func(t *testing.T) {
				dir := t.TempDir()
				tmp := filepath.Join(dir, ".ferry-up-00ac")
				cmd := exec.Command(sh[0], append(sh[1:], "-c", posix.Scripts["cleanup"], "sh", tmp)...)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				// The script starts late, makes its dir and dies.
				time.Sleep(150 * time.Millisecond)
				if err := os.MkdirAll(tmp+".999999994/r", 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(tmp+".999999994/pid", []byte("999999994\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := cmd.Wait(); err != nil {
					t.Fatalf("cleanup: %v\n%s", err, out.String())
				}
				if des, _ := os.ReadDir(dir); len(des) != 0 {
					t.Fatalf("left %v: the cleanup did not wait for a script that started late", des)
				}
			})
			t.Run("started", func(t *testing.T) {
				tmp := filepath.Join(t.TempDir(), ".ferry-up-00ad")
				// Waiting would take five sleeps of 0.1s. The quickest of
				// three runs, so that a loaded machine's one slow start
				// is not taken for a wait.
				quickest := time.Hour
				for range 3 {
					start := time.Now()
					if out, err := exec.Command(sh[0], append(sh[1:], "-c", posix.Scripts["cleanup"], "sh", tmp, "started")...).CombinedOutput(); err != nil {
						t.Fatalf("cleanup: %v\n%s", err, out)
					}
					quickest = min(quickest, time.Since(start))
				}
				if quickest >= 450*time.Millisecond {
					t.Errorf("cleanup took %v with the script started and its dir gone", quickest)
				}
			})
		})
	}
}
