package treediff

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/transfer/archive"
)

func file(p, content string, mode Perm) Entry {
	return Entry{Path: p, Type: File, Mode: mode, Size: int64(len(content)), Digest: DigestOf([]byte(content))}
}

func manifestOf(es ...Entry) *Manifest {
	return &Manifest{Format: Format, Dir: "work", Mode: "agent", Entries: es}
}

// TestDiff: each kind of change is said as what it is, in walk order,
// with totals, and the filter keeps what it matches.
func TestDiff(t *testing.T) {
	before := manifestOf(
		Entry{Path: "d", Type: Dir, Mode: 0o755},
		file("d/f", "x", 0o644),
		file("gone", "bye", 0o644),
		Entry{Path: "l", Type: Symlink, Mode: 0o777, Target: "d/f"},
		file("m", "one", 0o644),
		file("t", "t", 0o644),
	)
	after := manifestOf(
		file("d", "now a file", 0o644),
		Entry{Path: "l", Type: Symlink, Mode: 0o777, Target: "m"},
		file("m", "two", 0o600),
		file("new", "hi", 0o644),
		file("t", "t", 0o644),
	)
	r, err := Diff(before, after, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range r.Created {
		got = append(got, "+"+c.Path)
	}
	for _, c := range r.Deleted {
		got = append(got, "-"+c.Path)
	}
	for _, c := range r.Modified {
		got = append(got, "~"+c.Path+":"+strings.Join(c.Changed, ","))
	}
	want := "+new -d/f -gone ~d:type,mode ~l:target ~m:content,mode"
	if strings.Join(got, " ") != want {
		t.Fatalf("diff %q; want %q", strings.Join(got, " "), want)
	}
	if r.Totals.CreatedBytes != 2 || r.Totals.DeletedBytes != 4 || r.Totals.Mode != 2 || r.Totals.Content != 1 {
		t.Errorf("totals %+v", r.Totals)
	}
	r, _ = Diff(before, after, Filter{Include: []string{"**/*"}, Exclude: []string{"d/**", "m"}})
	// "d/**" matches d itself too (doublestar), so only l is left modified.
	if r.Totals.Created != 1 || r.Totals.Deleted != 1 || r.Totals.Modified != 1 || r.Modified[0].Path != "l" {
		t.Errorf("filtered totals %+v", r.Totals)
	}
	if _, err := Diff(before, &Manifest{Dir: "other"}, Filter{}); !errors.Is(err, ErrDirMismatch) {
		t.Errorf("diff of two dirs: %v", err)
	}
	if _, err := Diff(before, after, Filter{Include: []string{"[x"}}); !errors.Is(err, ErrBadGlob) {
		t.Errorf("bad glob: %v", err)
	}
}

// TestReadManifest: a written manifest reads back; one that breaks a
// rule is refused naming the entry.
func TestReadManifest(t *testing.T) {
	text := "hello\n"
	ok := manifestOf(Entry{Path: "d", Type: Dir, Mode: 0o755}, file("d/f", text, 0o644))
	ok.ContentCap = 100
	ok.Entries[1].Text = &text
	var buf bytes.Buffer
	if err := ok.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	m, err := ReadManifest(&buf, archive.Limits{})
	if err != nil || len(m.Entries) != 2 || *m.Entries[1].Text != text {
		t.Fatalf("read back: %v, %v", m, err)
	}
	lie := "other\n"
	for _, tc := range []struct {
		name     string
		m        *Manifest
		sentinel error
		entry    string
	}{
		{"dotdot", manifestOf(file("../x", "", 0o644)), ErrManifest, "../x"},
		{"absolute", manifestOf(file("/etc/passwd", "", 0o644)), ErrManifest, "/etc/passwd"},
		{"twice", manifestOf(file("a", "", 0o644), file("a", "", 0o644)), ErrManifest, "a"},
		{"order", manifestOf(file("b", "", 0o644), file("a", "", 0o644)), ErrManifest, "a"},
		{"orphan", manifestOf(file("d/f", "", 0o644)), ErrManifest, "d/f"},
		{"escape", manifestOf(Entry{Path: "l", Type: Symlink, Mode: 0o777, Target: "../x"}), archive.ErrLinkEscape, "l"},
		{"digest", manifestOf(Entry{Path: "f", Type: File, Digest: "zz"}), ErrManifest, "f"},
		{"text lies", &Manifest{Format: Format, Dir: "w", Mode: "posix", ContentCap: 100, Entries: []Entry{{Path: "f", Type: File, Size: 6, Digest: DigestOf([]byte(text)), Text: &lie}}}, ErrManifest, "f"},
		{"entries", manifestOf(file("a", "", 0o644), file("b", "", 0o644), file("c", "", 0o644), file("d", "", 0o644)), archive.ErrLimit, "d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tc.m.WriteJSON(&buf)
			_, err := ReadManifest(&buf, archive.Limits{MaxEntries: 3})
			var ee *archive.EntryError
			if !errors.Is(err, tc.sentinel) || !errors.As(err, &ee) || ee.Entry != tc.entry {
				t.Fatalf("err = %v; want %v naming %q", err, tc.sentinel, tc.entry)
			}
		})
	}
	for _, bad := range []string{`{"format":2,"dir":"w","mode":"agent","entries":[]}`, `{"format":1,"dir":"w","mode":"agent","entries":[],"x":1}`, `{"format":1,"dir":"w","mode":"agent","entries":[{"path":"f","type":"file","mode":"9999","digest":""}]}`} {
		if _, err := ReadManifest(strings.NewReader(bad), archive.Limits{}); !errors.Is(err, ErrManifest) {
			t.Errorf("%s: err = %v; want ErrManifest", bad, err)
		}
	}
}

// FuzzReadManifest: whatever a --since file holds, ReadManifest refuses
// it or returns a manifest whose entries obey the rules, which then
// diffs against itself as no change and writes back to what reads the
// same.
func FuzzReadManifest(f *testing.F) {
	text := "x\n"
	m := manifestOf(Entry{Path: "d", Type: Dir, Mode: 0o755}, file("d/f", text, 0o644), Entry{Path: "l", Type: Symlink, Mode: 0o777, Target: "d/f"})
	var buf bytes.Buffer
	m.WriteJSON(&buf)
	f.Add(buf.Bytes())
	f.Add([]byte(`{"format":1,"dir":"w","mode":"posix","content_cap":9,"entries":[{"path":"f","type":"file","mode":"0644","size":2,"digest":"` + DigestOf([]byte(text)) + `","text":"x\n","mtime":1}]}`))
	f.Add([]byte(`{"format":1,"dir":"w","mode":"agent","entries":[{"path":"a/../b","type":"dir","mode":"0755","mtime":0}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ReadManifest(bytes.NewReader(b), archive.Limits{MaxEntries: 64})
		if err != nil {
			if !errors.Is(err, ErrManifest) && !errors.Is(err, archive.ErrLimit) && !errors.Is(err, archive.ErrLinkEscape) {
				t.Fatalf("error matching no sentinel: %v", err)
			}
			return
		}
		for _, e := range m.Entries {
			if strings.HasPrefix(e.Path, "/") || strings.Contains("/"+e.Path+"/", "/../") {
				t.Fatalf("accepted path %q", e.Path)
			}
		}
		r, err := Diff(m, m, Filter{})
		if err != nil || r.Totals.Created+r.Totals.Deleted+r.Totals.Modified != 0 {
			t.Fatalf("self diff: %+v, %v", r, err)
		}
		var out bytes.Buffer
		if err := m.WriteJSON(&out); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadManifest(&out, archive.Limits{MaxEntries: 64}); err != nil {
			t.Fatalf("written back, refused: %v", err)
		}
	})
}
