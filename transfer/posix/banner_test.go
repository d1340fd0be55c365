package posix_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/transfer/posix"
)

// TestBanner gives every sandbox a login profile that talks, on stdout and
// stderr, even in lines that look like ferry's own: transfers, Stat and
// errors must come through intact.
func TestBanner(t *testing.T) {
	g, c := newGateway(t, gateway.Config{})
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) {
			b := newBox(t, g, c, f, "WELCOME to ferry-0000 stream\nferry-0000 ok 7\n\x00binary\xff")
			// And 200 KiB more of it, with no newline at the end.
			appendProfile(t, b, "head -c 204800 /dev/zero | tr '\\0' 'x'\n")
			want := wantTree(sampleTree)
			res, err := b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, true, sampleTree)), "t", posix.PlaceNew, int64(len(sampleTree)))
			if err != nil {
				t.Fatal(err)
			}
			if res.Entries != int64(len(sampleTree)) {
				t.Fatalf("Entries = %d", res.Entries)
			}
			sameTree(t, "uploaded", tree(t, filepath.Join(b.dir, "t")), want)
			var out bytes.Buffer
			res, err = b.r.Download(ctxFor(t), "t", []string{"."}, &out)
			if err != nil {
				t.Fatal(err)
			}
			sameTree(t, "downloaded", untar(t, out.Bytes()), want)
			if res.WireBytes < int64(out.Len())+204800 {
				t.Fatalf("WireBytes %d leaves out the banner", res.WireBytes)
			}
			for p, want := range map[string]posix.Kind{"t": posix.Dir, "t/big.bin": posix.File, "nope": posix.Missing} {
				if k, err := b.r.Stat(ctxFor(t), p); err != nil || k != want {
					t.Fatalf("Stat(%s) = %v, %v", p, k, err)
				}
			}
			_, err = b.r.Download(ctxFor(t), "t", []string{"nope"}, &out)
			wantPathErr(t, err, posix.ErrNotExist, "t/nope")
			_, err = b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, true, sampleTree)), "t", posix.PlaceNew, -1)
			wantPathErr(t, err, posix.ErrExist, "t")
			noLeftovers(t, b.dir)
		})
	}
}

// TestBannerTooLong: past MaxBanner of stdout with no marker, Download
// gives up instead of buffering on.
func TestBannerTooLong(t *testing.T) {
	b := gatewayBox(t, flavors[0], gateway.Config{}, "")
	appendProfile(t, b, "head -c 2000000 /dev/zero\n")
	os.Mkdir(filepath.Join(b.dir, "d"), 0o755)
	var out bytes.Buffer
	_, err := b.r.Download(ctxFor(t), "d", []string{"."}, &out)
	if err == nil || !strings.Contains(err.Error(), "marker") || out.Len() != 0 {
		t.Fatalf("err = %v with %d bytes written", err, out.Len())
	}
	if errors.Is(err, posix.ErrNotExist) {
		t.Fatal(err)
	}
}

func appendProfile(t *testing.T, b box, s string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(b.dir, ".profile"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}
