package posix_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/transfer/posix"
)

// TestRoundTrip uploads a tree made with archive/tar, checks it on the
// sandbox's disk, downloads it again and checks the stream.
func TestRoundTrip(t *testing.T) {
	g, c := newGateway(t, gateway.Config{})
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) {
			b := newBox(t, g, c, f, "")
			arch := tarOf(t, true, sampleTree)
			want := wantTree(sampleTree)
			// A destination whose every part would trip a careless
			// script: a leading dash, spaces, quotes, unicode, globs.
			dest := `-new dir/it's "x" ☃ *`
			res, err := b.r.Upload(ctxFor(t), bytes.NewReader(arch), dest, posix.PlaceNew, int64(len(sampleTree)))
			if err != nil {
				t.Fatal(err)
			}
			if res.Entries != int64(len(sampleTree)) || res.WireBytes < int64(len(arch)) {
				t.Fatalf("Upload result %+v, want %d entries and at least %d wire bytes", res, len(sampleTree), len(arch))
			}
			sameTree(t, "uploaded", tree(t, filepath.Join(b.dir, dest)), want)
			if fi, err := os.Stat(filepath.Join(b.dir, dest)); err != nil || fi.Mode().Perm() != 0o755 {
				t.Fatalf("dest root: %v, %v", fi, err)
			}
			noLeftovers(t, b.dir)

			var out bytes.Buffer
			res, err = b.r.Download(ctxFor(t), dest, []string{"."}, &out)
			if err != nil {
				t.Fatal(err)
			}
			sameTree(t, "downloaded", untar(t, out.Bytes()), want)
			// The root "." is in the stream but not counted.
			if res.Entries != int64(len(sampleTree)) || res.WireBytes < int64(out.Len()) {
				t.Fatalf("Download result %+v, want %d entries, %d+ wire bytes", res, len(sampleTree), out.Len())
			}

			// Names, absolute dir, names that look like options.
			out.Reset()
			names := []string{"-dash", "sp ace/it's \"quoted\".txt", "a/link", "ünï cødé ☃/"}
			res, err = b.r.Download(ctxFor(t), filepath.Join(b.dir, dest), names, &out)
			if err != nil {
				t.Fatal(err)
			}
			sub := map[string]entry{}
			for n, e := range want {
				for _, p := range []string{"-dash/", "sp ace/it's", "a/link", "ünï cødé ☃/"} {
					if strings.HasPrefix(n, p) {
						sub[n] = e
					}
				}
			}
			sameTree(t, "downloaded names", untar(t, out.Bytes()), sub)
			if res.Entries != int64(len(sub)) {
				t.Fatalf("Download counted %d entries, want %d", res.Entries, len(sub))
			}
		})
	}
}

// TestUploadNoRoot uploads an archive without a "./" entry: the new root
// gets the sandbox's default mode.
func TestUploadNoRoot(t *testing.T) {
	b := gatewayBox(t, flavors[0], gateway.Config{}, "")
	entries := []entry{{name: "f", mode: 0o640, body: "x"}}
	if _, err := b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, false, entries)), "deep/er/new", posix.PlaceNew, 1); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "uploaded", tree(t, filepath.Join(b.dir, "deep/er/new")), wantTree(entries))
	noLeftovers(t, b.dir)
}

func TestPlaceNewExists(t *testing.T) {
	g, c := newGateway(t, gateway.Config{})
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) {
			b := newBox(t, g, c, f, "")
			for _, dest := range []string{"dir", "file", "link", "."} {
				p := filepath.Join(b.dir, dest)
				switch dest {
				case "dir":
					os.MkdirAll(filepath.Join(p, "keep"), 0o755)
				case "file":
					os.WriteFile(p, []byte("keep"), 0o644)
				case "link":
					os.Symlink("nowhere", p)
				}
				before := snapshot(t, b.dir)
				_, err := b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, true, sampleTree)), dest, posix.PlaceNew, -1)
				wantPathErr(t, err, posix.ErrExist, dest)
				if !errors.Is(err, fs.ErrExist) {
					t.Fatalf("%v is not fs.ErrExist", err)
				}
				if after := snapshot(t, b.dir); after != before {
					t.Fatalf("sandbox changed by a refused upload:\n%s\nwas\n%s", after, before)
				}
			}
		})
	}
}

func TestPlaceInto(t *testing.T) {
	g, c := newGateway(t, gateway.Config{})
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) {
			b := newBox(t, g, c, f, "")
			dest := filepath.Join(b.dir, "-in to")
			elsewhere := filepath.Join(b.dir, "elsewhere")
			for _, d := range []string{"a/old", elsewhere} {
				if !filepath.IsAbs(d) {
					d = filepath.Join(dest, d)
				}
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			write := func(p, s string) {
				if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(p, mtime, mtime); err != nil {
					t.Fatal(err)
				}
			}
			write(filepath.Join(dest, "a/old/keep"), "keep")
			write(filepath.Join(dest, "a/hello.txt"), "old hello")
			write(filepath.Join(dest, "top"), "untouched")
			// A symlink to a directory where the archive has a file: the
			// link is replaced, the directory it points to is not entered.
			if err := os.Symlink(elsewhere, filepath.Join(dest, "a/run.sh")); err != nil {
				t.Fatal(err)
			}
			into := []entry{
				{name: "a/", mode: 0o750},
				{name: "a/hello.txt", mode: 0o600, body: "new hello"},
				{name: "a/run.sh", mode: 0o755, body: "#!/bin/sh\n"},
				{name: "a/new/", mode: 0o755},
				{name: "a/new/f", mode: 0o644, body: "f"},
				{name: ".dot", mode: 0o644, body: "dot"},
				{name: "-dash", mode: 0o644, body: "dash"},
			}
			res, err := b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, true, into)), "-in to", posix.PlaceInto, int64(len(into)))
			if err != nil {
				t.Fatal(err)
			}
			if res.Entries != int64(len(into)) {
				t.Fatalf("Entries = %d, want %d", res.Entries, len(into))
			}
			want := wantTree(into)
			want["a/old/"] = entry{name: "a/old/", mode: 0o755}
			want["a/old/keep"] = entry{name: "a/old/keep", mode: 0o644, body: "keep"}
			want["top"] = entry{name: "top", mode: 0o644, body: "untouched"}
			sameTree(t, "merged", tree(t, dest), want)
			// The merged directory took the archive's mode (checked
			// above) and, where tar restores them, its mtime.
			if fi, err := os.Stat(filepath.Join(dest, "a")); err != nil || f.name == "gnu" && !fi.ModTime().Equal(mtime) {
				t.Fatalf("merged dir: %v, %v", fi.ModTime(), err)
			}
			if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
				t.Fatalf("merge wrote through a symlink: %v", ents)
			}
			noLeftovers(t, b.dir)

			// A directory where a file is: refused before anything moves.
			before := snapshot(t, b.dir)
			clash := []entry{{name: "zz-first", mode: 0o644, body: "x"}, {name: "top/", mode: 0o755}, {name: "top/x", mode: 0o644, body: "x"}}
			_, err = b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, false, clash)), "-in to", posix.PlaceInto, -1)
			wantPathErr(t, err, posix.ErrExist, "-in to/top")
			clash = []entry{{name: "a/", mode: 0o755}, {name: "a/old", mode: 0o644, body: "x"}}
			_, err = b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, false, clash)), "-in to", posix.PlaceInto, -1)
			wantPathErr(t, err, posix.ErrExist, "-in to/a/old")
			if after := snapshot(t, b.dir); after != before {
				t.Fatalf("sandbox changed by a refused merge:\n%s\nwas\n%s", after, before)
			}
			noLeftovers(t, b.dir)

			_, err = b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, false, into)), "missing", posix.PlaceInto, -1)
			wantPathErr(t, err, posix.ErrNotExist, "missing")
			_, err = b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, false, into)), "-in to/top", posix.PlaceInto, -1)
			wantPathErr(t, err, posix.ErrNotDir, "-in to/top")
			if after := snapshot(t, b.dir); after != before {
				t.Fatalf("sandbox changed by a refused upload")
			}
		})
	}
}

func TestPlaceAs(t *testing.T) {
	g, c := newGateway(t, gateway.Config{})
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) {
			b := newBox(t, g, c, f, "")
			one := []entry{{name: "f.txt", mode: 0o640, body: "one"}}
			two := []entry{{name: "f.txt", mode: 0o640, body: "two"}}
			read := func(p string) string {
				t.Helper()
				got := tree(t, filepath.Join(b.dir, filepath.Dir(p)))
				e, ok := got[filepath.Base(p)]
				if !ok {
					t.Fatalf("%s missing", p)
				}
				if e.mode != 0o640 {
					t.Fatalf("%s mode %o", p, e.mode)
				}
				return e.body
			}
			// New, in a new parent, from an archive with a root entry.
			if _, err := b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, true, one)), "p q/-new name", posix.PlaceAs, 1); err != nil {
				t.Fatal(err)
			}
			if got := read("p q/-new name"); got != "one" {
				t.Fatalf("placed %q", got)
			}
			// Over a file.
			if _, err := b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, false, two)), "p q/-new name", posix.PlaceAs, 1); err != nil {
				t.Fatal(err)
			}
			if got := read("p q/-new name"); got != "two" {
				t.Fatalf("replaced with %q", got)
			}
			// Over a symlink to a directory: the link goes, the directory
			// is not entered.
			os.Mkdir(filepath.Join(b.dir, "target"), 0o755)
			os.Symlink("target", filepath.Join(b.dir, "p q/link"))
			if _, err := b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, false, one)), "p q/link", posix.PlaceAs, 1); err != nil {
				t.Fatal(err)
			}
			if got := read("p q/link"); got != "one" {
				t.Fatalf("replaced link with %q", got)
			}
			if ents, _ := os.ReadDir(filepath.Join(b.dir, "target")); len(ents) != 0 {
				t.Fatalf("wrote through the link: %v", ents)
			}
			// A directory entry becomes a new path, not an existing one.
			tree1 := []entry{{name: "d/", mode: 0o750}, {name: "d/x", mode: 0o640, body: "x"}}
			if _, err := b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, false, tree1)), "dd", posix.PlaceAs, 2); err != nil {
				t.Fatal(err)
			}
			sameTree(t, "dir as", tree(t, filepath.Join(b.dir, "dd")), map[string]entry{"x": {name: "x", mode: 0o640, body: "x"}})

			before := snapshot(t, b.dir)
			_, err := b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, false, tree1)), "p q/-new name", posix.PlaceAs, -1)
			wantPathErr(t, err, posix.ErrExist, "p q/-new name")
			_, err = b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, false, one)), "dd", posix.PlaceAs, -1)
			wantPathErr(t, err, posix.ErrExist, "dd")
			_, err = b.r.Upload(ctxFor(t), bytes.NewReader(tarOf(t, false, append(one, entry{name: "g", mode: 0o644}))), "new", posix.PlaceAs, -1)
			if err == nil || !strings.Contains(err.Error(), "exactly one") {
				t.Fatalf("two entries: %v", err)
			}
			if after := snapshot(t, b.dir); after != before {
				t.Fatalf("sandbox changed by refused uploads:\n%s\nwas\n%s", after, before)
			}
			noLeftovers(t, b.dir)
		})
	}
}
