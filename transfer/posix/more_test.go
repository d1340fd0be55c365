package posix_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
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
	arch := archive(t, true, sampleTree)
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
	if _, err := b.r.Upload(ctxFor(t), bytes.NewReader(archive(t, true, sampleTree)), "t", posix.PlaceNew, int64(len(sampleTree))); err != nil {
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
	arch := archive(t, true, sampleTree)
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

// TestSweep: an upload removes temp dirs of earlier uploads whose process
// is gone, and leaves those of live ones (and anything else) alone.
func TestSweep(t *testing.T) {
	b := gatewayBox(t, flavors[0], gateway.Config{}, "")
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
	dead := mk(".ferry-up-0123", "999999999")
	live := mk(".ferry-up-4567", strconv.Itoa(os.Getpid()))
	young := mk(".ferry-up-89ab", "") // made, pid not yet written
	other := mk(".ferry-other", "999999999")
	if _, err := b.r.Upload(ctxFor(t), bytes.NewReader(archive(t, true, sampleTree)), "p/new", posix.PlaceNew, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("dead temp dir kept: %v", err)
	}
	for _, d := range []string{live, young, other} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("%s swept: %v", d, err)
		}
	}
}
