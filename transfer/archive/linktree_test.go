package archive_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// treeEntry is one entry of a tree both Extract (as tar) and LinkTree are
// given.
type treeEntry struct{ kind, name, target string }

// TestLinkTreeAgreesWithExtract: LinkTree refuses exactly the trees
// whose extraction Extract refuses for a symlink, with the same sentinel,
// naming the same entry, so that a save checking with it commits only
// what a restore accepts.
func TestLinkTreeAgreesWithExtract(t *testing.T) {
	chain := []treeEntry{}
	for i := range 41 {
		chain = append(chain, treeEntry{"link", fmt.Sprintf("l%02d", i), fmt.Sprintf("l%02d", i+1)})
	}
	cases := []struct {
		name    string
		entries []treeEntry
		want    error // nil: both accept
		entry   string
	}{
		{"inside", []treeEntry{{"dir", "d", ""}, {"file", "d/f", ""}, {"link", "l", "d/f"}, {"link", "d/up", "../d/f"}}, nil, ""},
		{"dangling", []treeEntry{{"link", "l", "nowhere/x"}}, nil, ""},
		{"dot", []treeEntry{{"link", "self", "."}}, nil, ""},
		{"absolute", []treeEntry{{"link", "abs", "/etc/passwd"}}, archive.ErrLinkEscape, "abs"},
		{"up", []treeEntry{{"dir", "d", ""}, {"link", "d/up", "../../x"}}, archive.ErrLinkEscape, "d/up"},
		// Each stays inside lexically; a resolves to ../x through b.
		{"through another", []treeEntry{{"dir", "d", ""}, {"link", "a", "d/b/../../x"}, {"link", "d/b", "."}}, archive.ErrLinkEscape, "a"},
		{"a later absolute", []treeEntry{{"link", "a", "b/x"}, {"link", "b", "/tmp"}}, archive.ErrLinkEscape, "b"},
		{"through a file, lexical", []treeEntry{{"file", "f", ""}, {"link", "a", "f/../.."}}, archive.ErrLinkEscape, "a"},
		{"chain over the depth", chain, archive.ErrLimit, "l00"},
		{"chain at the depth", chain[1:], nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			var lt archive.LinkTree
			var lexical error
			for _, e := range tc.entries {
				switch e.kind {
				case "dir":
					b.dir(e.name + "/")
					lt.Dir(e.name)
				case "file":
					b.file(e.name, "x")
				case "link":
					b.symlink(e.name, e.target)
					if err := lt.Symlink(e.name, e.target); err != nil && lexical == nil {
						lexical = err
					}
				}
			}
			treeErr := lexical
			if treeErr == nil {
				treeErr = lt.Check(0)
			}
			dest := filepath.Join(t.TempDir(), "dest")
			_, xerr := archive.Extract(context.Background(), bytes.NewReader(b.end()), dest, archive.ExtractOptions{})
			for what, err := range map[string]error{"LinkTree": treeErr, "Extract": xerr} {
				if tc.want == nil {
					if err != nil {
						t.Errorf("%s: %v, want it accepted", what, err)
					}
					continue
				}
				var ee *archive.EntryError
				if !errors.Is(err, tc.want) || !errors.As(err, &ee) || ee.Entry != tc.entry || !strings.Contains(err.Error(), tc.entry) {
					t.Errorf("%s: %v, want %v naming %q", what, err, tc.want, tc.entry)
				}
			}
		})
	}
}
