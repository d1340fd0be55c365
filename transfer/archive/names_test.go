package archive_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// TestExtractNames: with ExtractOptions.Names, only the names asked for
// and what is under them come out, however the stream spells them; any
// other entry is ErrUnrequested naming it, and nothing is placed.
func TestExtractNames(t *testing.T) {
	all := []archive.Placement{archive.PlaceNew, archive.PlaceInto, archive.PlaceAs}
	notAs := []archive.Placement{archive.PlaceNew, archive.PlaceInto}
	tests := []struct {
		name   string
		names  []string
		places []archive.Placement
		stream []byte
		want   error  // nil: accepted
		entry  string // the entry a refusal names
		files  map[string]string
	}{
		{name: "dir and contents", names: []string{"payload"}, places: notAs,
			stream: newBuilder().dir("payload/").file("payload/x", "x\n").end(),
			files:  map[string]string{"payload/x": "x\n"}},
		{name: "dir as", names: []string{"payload"}, places: []archive.Placement{archive.PlaceAs},
			stream: newBuilder().dir("payload/").file("payload/x", "x\n").end(),
			files:  map[string]string{"x": "x\n"}},
		{name: "spelt with ./ and /", names: []string{"./payload/"}, places: notAs,
			stream: newBuilder().file("./payload//x", "x\n").end(),
			files:  map[string]string{"payload/x": "x\n"}},
		{name: "file as", names: []string{"f"}, places: []archive.Placement{archive.PlaceAs},
			stream: newBuilder().file("./f", "f\n").end()},
		{name: "dot allows all", names: []string{"."}, places: notAs,
			stream: newBuilder().dir("./").file(".bashrc", "b\n").file("./a", "a\n").end(),
			files:  map[string]string{".bashrc": "b\n", "a": "a\n"}},
		{name: "dot among others", names: []string{"x", "."}, places: notAs,
			stream: newBuilder().file("y", "y\n").end(),
			files:  map[string]string{"y": "y\n"}},
		{name: "deeper name", names: []string{"a/b"}, places: notAs,
			stream: newBuilder().file("a/b/c", "c\n").end(),
			files:  map[string]string{"a/b/c": "c\n"}},
		{name: "two names", names: []string{"meta.json", "runner.log"}, places: notAs,
			stream: newBuilder().file("meta.json", "{}").file("runner.log", "l").end(),
			files:  map[string]string{"meta.json": "{}", "runner.log": "l"}},

		{name: "beside", names: []string{"payload"}, places: all, want: archive.ErrUnrequested, entry: "./.bashrc",
			stream: newBuilder().dir("payload/").file("payload/x", "x\n").file("./.bashrc", "pwned\n").end()},
		{name: "common prefix", names: []string{"payload"}, places: all, want: archive.ErrUnrequested, entry: "payloadx",
			stream: newBuilder().file("payload", "p\n").file("payloadx", "pwned\n").end()},
		{name: "first entry", names: []string{"payload"}, places: all, want: archive.ErrUnrequested, entry: ".git/hooks/pre-commit",
			stream: newBuilder().file(".git/hooks/pre-commit", "pwned\n").file("payload", "p\n").end()},
		{name: "parent of a deeper name", names: []string{"a/b"}, places: all, want: archive.ErrUnrequested, entry: "a/",
			stream: newBuilder().dir("a/").file("a/b", "b\n").end()},
		{name: "sibling of a deeper name", names: []string{"a/b"}, places: all, want: archive.ErrUnrequested, entry: "a/bc",
			stream: newBuilder().file("a/b", "b\n").file("a/bc", "pwned\n").end()},
		{name: "root without dot", names: []string{"payload"}, places: all, want: archive.ErrUnrequested, entry: ".",
			stream: newBuilder().dir(".").file("payload", "p\n").end()},
		{name: "other name as", names: []string{"want"}, places: all, want: archive.ErrUnrequested, entry: "other",
			stream: newBuilder().file("other", "pwned\n").end()},
		{name: "symlink beside", names: []string{"payload"}, places: all, want: archive.ErrUnrequested, entry: ".bashrc",
			stream: newBuilder().file("payload", "p\n").symlink(".bashrc", "payload").end()},
		{name: "hard link beside", names: []string{"payload"}, places: all, want: archive.ErrUnrequested, entry: "h",
			stream: newBuilder().file("payload", "p\n").hardlink("h", "payload").end()},
	}
	for _, tt := range tests {
		for _, place := range tt.places {
			t.Run(fmt.Sprintf("%s/%v", tt.name, place), func(t *testing.T) {
				s := newSandbox(t, place)
				_, err := extract(t, tt.stream, s.dest, archive.ExtractOptions{Place: place, Names: tt.names})
				if tt.want == nil {
					if err != nil {
						t.Fatalf("Extract: %v", err)
					}
					wantFiles(t, s.dest, tt.files)
					return
				}
				if !errors.Is(err, tt.want) || !errors.Is(err, archive.ErrUnsafePath) {
					t.Fatalf("error %v, want %v (an unsafe path)", err, tt.want)
				}
				var ee *archive.EntryError
				if !errors.As(err, &ee) || ee.Entry != tt.entry {
					t.Errorf("error %v names %q, want %q", err, entryOf(ee), tt.entry)
				}
				s.checkUntouched(t, place)
			})
		}
	}
}

func entryOf(ee *archive.EntryError) string {
	if ee == nil {
		return ""
	}
	return ee.Entry
}

// TestExtractBadNames: a Names list that asks for nothing, or for an
// unsafe name, is the caller's error, before anything is read.
func TestExtractBadNames(t *testing.T) {
	for _, req := range [][]string{{}, {"../x"}, {"/etc"}, {""}} {
		t.Run(fmt.Sprintf("%q", req), func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "out")
			_, err := extract(t, newBuilder().file("x", "x").end(), dest, archive.ExtractOptions{Names: req})
			var ee *archive.EntryError
			if err == nil || errors.As(err, &ee) {
				t.Fatalf("err = %v, want an error of the call", err)
			}
			if left := names(t, filepath.Dir(dest)); len(left) != 0 {
				t.Errorf("Extract left %q", left)
			}
		})
	}
}
