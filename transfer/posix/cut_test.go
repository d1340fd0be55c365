package posix_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/local"
	"github.com/ferry-dev/ferry/relay/relaytest"
	"github.com/ferry-dev/ferry/transfer/posix"
)

// cutFractions are where the gateway's fault hook breaks the relay, as
// fractions of the bytes an undisturbed call moves.
var cutFractions = []float64{0.1, 0.5, 0.9}

// TestCutUpload breaks the relay part way through uploads: always an error
// wrapping relay.ErrRelayLost, dest never created or changed, no temp dir.
func TestCutUpload(t *testing.T) {
	arch := tarOf(t, true, sampleTree)
	for _, f := range flavors[:2] {
		for _, frac := range cutFractions {
			for _, place := range []posix.Placement{posix.PlaceNew, posix.PlaceInto} {
				t.Run(fmt.Sprintf("%s/%v/%v", f.name, frac, place), func(t *testing.T) {
					t.Parallel()
					// The fault hook counts stdin and output together;
					// the upload's output is a few dozen bytes.
					b := gatewayBox(t, f, gateway.Config{CutAfter: int64(frac * float64(len(arch)))}, "")
					dest := "new"
					if place == posix.PlaceInto {
						dest = "into"
						os.MkdirAll(filepath.Join(b.dir, dest, "a"), 0o755)
						os.WriteFile(filepath.Join(b.dir, dest, "a/hello.txt"), []byte("old"), 0o644)
					}
					before := snapshot(t, b.dir)
					_, err := b.r.Upload(ctxFor(t), bytes.NewReader(arch), dest, place, int64(len(sampleTree)))
					if !errors.Is(err, relay.ErrRelayLost) {
						t.Fatalf("err = %v, want relay.ErrRelayLost", err)
					}
					if after := snapshot(t, b.dir); after != before {
						t.Fatalf("sandbox changed by a cut upload:\n%s\nwas\n%s", after, before)
					}
					noLeftovers(t, b.dir)
				})
			}
		}
	}
}

// TestCutDownload breaks the relay part way through downloads: always an
// error wrapping relay.ErrRelayLost, and the sandbox's tree unchanged.
func TestCutDownload(t *testing.T) {
	for _, f := range flavors[:2] {
		// The size of an undisturbed download, banner and control
		// lines included.
		b := gatewayBox(t, f, gateway.Config{}, "")
		if _, err := b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, true, sampleTree)), "src", posix.PlaceNew, -1); err != nil {
			t.Fatal(err)
		}
		res, err := b.r.Download(ctxFor(t), "src", []string{"."}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		for _, frac := range cutFractions {
			t.Run(fmt.Sprintf("%s/%v", f.name, frac), func(t *testing.T) {
				t.Parallel()
				b := gatewayBox(t, f, gateway.Config{CutAfter: int64(frac * float64(res.WireBytes))}, "")
				setup := posix.Remote{X: localRunner(t, b.dir)}
				if _, err := setup.Upload(ctxFor(t), bytes.NewReader(tarOf(t, true, sampleTree)), "src", posix.PlaceNew, -1); err != nil {
					t.Fatal(err)
				}
				before := snapshot(t, b.dir)
				var out bytes.Buffer
				_, err := b.r.Download(ctxFor(t), "src", []string{"."}, &out)
				if !errors.Is(err, relay.ErrRelayLost) {
					t.Fatalf("err = %v after %d bytes, want relay.ErrRelayLost", err, out.Len())
				}
				if int64(out.Len()) >= res.WireBytes {
					t.Fatalf("%d bytes passed a cut at %d", out.Len(), int64(frac*float64(res.WireBytes)))
				}
				if after := snapshot(t, b.dir); after != before {
					t.Fatal("sandbox changed by a download")
				}
			})
		}
	}
}

// TestLocal runs a round trip and a cut through relay/local, the runner
// the gateway itself uses, without gRPC in between.
func TestLocal(t *testing.T) {
	dir := t.TempDir()
	x, err := local.New(local.Config{Dir: dir, Shell: []string{"/bin/bash", "-lc"}, Env: []string{"HOME=" + dir, "PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	r := posix.Remote{X: x}
	if _, err := r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, true, sampleTree)), "tree", posix.PlaceNew, int64(len(sampleTree))); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := r.Download(ctxFor(t), "tree", []string{"."}, &out)
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, "local", untar(t, out.Bytes()), wantTree(sampleTree))

	cx := relaytest.CutOutput(x, res.WireBytes/2)
	_, err = posix.Remote{X: cx}.Download(ctxFor(t), "tree", []string{"."}, io.Discard)
	if !errors.Is(err, relay.ErrRelayLost) {
		t.Fatalf("err = %v, want relay.ErrRelayLost", err)
	}
	_, err = posix.Remote{X: x}.Download(ctxFor(t), "tree", []string{"nope"}, io.Discard)
	wantPathErr(t, err, posix.ErrNotExist, "tree/nope")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("not fs.ErrNotExist")
	}
}

// localRunner runs commands in dir as a gateway would, without a login
// profile's PATH changes: for setting up a sandbox's disk.
func localRunner(t *testing.T, dir string) relay.Execer {
	t.Helper()
	x, err := local.New(local.Config{Dir: dir, Shell: []string{"/bin/bash", "-c"}})
	if err != nil {
		t.Fatal(err)
	}
	return x
}
