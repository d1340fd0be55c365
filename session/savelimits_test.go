package session_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// repeated is a file entry of size bytes claimed as one chunk of
// chunkSize bytes (all of data) again and again: nothing that big exists.
func repeated(path string, data []byte, size int64) *agentv1.ScanEntry {
	sum := sha256.Sum256(data)
	e := &agentv1.ScanEntry{Path: path, Kind: agentv1.Kind_KIND_FILE, Mode: 0o644, Size: size}
	for off := int64(0); off < size; off += int64(len(data)) {
		e.Chunks = append(e.Chunks, &agentv1.ChunkInfo{Id: sum[:], Offset: off, Size: min(int64(len(data)), size-off)})
	}
	return e
}

func symlinkEntry(path, target string) *agentv1.ScanEntry {
	return &agentv1.ScanEntry{Path: path, Kind: agentv1.Kind_KIND_SYMLINK, Mode: 0o777, Target: target}
}

// withLimits opens the store at dir again with the restore limits set
// changes, which its saves must stay within.
func withLimits(t *testing.T, dir string, set func(*archive.Limits)) *session.Store {
	t.Helper()
	b, err := local.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var lim archive.Limits
	set(&lim)
	s, err := session.New(session.Config{Backend: b, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSaveRefusesWhatRestoreRefuses is issue 13's hostile agent against
// the save: a manifest bomb, symlinks a restore would refuse, a file, a
// total and a count of entries over the restore's limits. Each save fails
// naming the entry, commits nothing for its key, and leaves another key
// of the same store restoring byte-identical.
func TestSaveRefusesWhatRestoreRefuses(t *testing.T) {
	x := []byte("x")
	chunk := bytes.Repeat([]byte("0123456789abcdef"), session.MaxChunkSize/16)
	var chain []*agentv1.ScanEntry
	for i := range archive.DefaultLimits().MaxLinkDepth + 1 {
		chain = append(chain, symlinkEntry(fmt.Sprintf("l%02d", i), fmt.Sprintf("l%02d", i+1)))
	}
	cases := []struct {
		name    string
		limits  func(*archive.Limits)
		entries []*agentv1.ScanEntry
		data    map[string][]byte
		want    error
		entry   string
	}{
		// 4096 references to one byte, where cdc.Default() cuts one chunk.
		{"manifest bomb", nil, []*agentv1.ScanEntry{repeated("bomb", x, 4096)}, map[string][]byte{"bomb": bytes.Repeat(x, 4096)}, session.ErrAgent, `"bomb"`},
		{"absolute symlink", nil, []*agentv1.ScanEntry{file("a", x), symlinkEntry("abs", "/etc/passwd")}, map[string][]byte{"a": x}, archive.ErrLinkEscape, `"abs"`},
		{"symlink up", nil, []*agentv1.ScanEntry{dirEntry("d"), symlinkEntry("d/up", "../../etc")}, nil, archive.ErrLinkEscape, `"d/up"`},
		// Each stays inside on its own; a resolves to ../x through d/b.
		{"escaping chain", nil, []*agentv1.ScanEntry{symlinkEntry("a", "d/b/../../x"), dirEntry("d"), symlinkEntry("d/b", ".")}, nil, archive.ErrLinkEscape, `"a"`},
		{"chain over the depth", nil, chain, nil, archive.ErrLimit, `"l00"`},
		{"file over the size limit", nil, []*agentv1.ScanEntry{repeated("huge", chunk, archive.DefaultLimits().MaxFileSize+session.MaxChunkSize)}, map[string][]byte{"huge": chunk}, archive.ErrLimit, `"huge"`},
		{"total over the limit", func(l *archive.Limits) { l.MaxTotalBytes = 3 }, []*agentv1.ScanEntry{file("a", []byte("ab")), file("b", []byte("cd"))}, map[string][]byte{"a": []byte("ab"), "b": []byte("cd")}, archive.ErrLimit, `"b"`},
		// With the root a restore sends, 4 entries: one too many.
		{"entries over the limit", func(l *archive.Limits) { l.MaxEntries = 3 }, []*agentv1.ScanEntry{dirEntry("a"), dirEntry("b"), dirEntry("c")}, nil, archive.ErrLimit, `"c"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, dir := diskStore(t)
			victim := filepath.Join(t.TempDir(), "victim")
			transcripts(t, victim, 7, 3, 64<<10)
			save(t, s, "victim", victim)
			hostile := s
			if tc.limits != nil {
				hostile = withLimits(t, dir, tc.limits)
			}
			c := fakeAgent(t, &liarAgent{entries: tc.entries, data: tc.data})
			_, err := hostile.Save(ctx, "hostile", &session.AgentSource{Client: c, Dir: "x", ReuseUnchanged: true})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.entry) {
				t.Fatalf("save: %v, want %v naming %s", err, tc.want, tc.entry)
			}
			if _, err := s.Load(ctx, "hostile", 0); !errors.Is(err, session.ErrNoSnapshot) {
				t.Fatalf("after the failed save: %v, want no snapshot", err)
			}
			dst := filepath.Join(t.TempDir(), "restored")
			restore(t, s, "victim", dst, session.RestoreOptions{})
			transfertest.EqualTrees(t, victim, dst)
		})
	}
}

// TestSaveSymlinkSameRules: a tree with an absolute symlink is refused by
// a save from the local directory and by one through the agent alike,
// with the extractor's sentinel and the entry named (a POSIX-mode save
// downloads with the extractor, which refuses it the same way); a tree
// whose symlinks stay inside saves both ways.
func TestSaveSymlinkSameRules(t *testing.T) {
	for _, tc := range []struct {
		name, target string
		want         error
	}{
		{"absolute", "/etc/passwd", archive.ErrLinkEscape},
		{"up", "../outside", archive.ErrLinkEscape},
		{"inside", "sessions/2026", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			src := filepath.Join(ws, "s")
			transcripts(t, src, 3, 2, 4<<10)
			if err := os.Symlink(tc.target, filepath.Join(src, "link")); err != nil {
				t.Fatal(err)
			}
			s, _ := memStore(t)
			c := agentIn(t, ws)
			for name, source := range map[string]session.Source{
				"dir":   session.DirSource{Dir: src},
				"agent": &session.AgentSource{Client: c, Dir: "s"},
			} {
				_, err := s.Save(context.Background(), name, source)
				if tc.want == nil {
					if err != nil {
						t.Errorf("%s: %v", name, err)
					}
					continue
				}
				var ee *archive.EntryError
				if !errors.Is(err, tc.want) || !errors.As(err, &ee) || ee.Entry != "link" {
					t.Errorf("%s: %v, want %v naming link", name, err, tc.want)
				}
				if _, err := s.Load(context.Background(), name, 0); !errors.Is(err, session.ErrNoSnapshot) {
					t.Errorf("%s: after the failed save: %v, want no snapshot", name, err)
				}
			}
		})
	}
}

// brokenManifests writes, beside the good snapshots of a store in dir,
// manifests that cannot be read: one corrupt, one that decodes to more
// JSON than a reader takes (a manifest bomb), one that says it is
// another snapshot. It returns their names, key/seq.
func brokenManifests(t *testing.T, dir string) []string {
	t.Helper()
	var bomb bytes.Buffer
	zw, err := zstd.NewWriter(&bomb, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	head := `{"format":1,"key":"bomb","seq":1,"time":"2026-01-01T00:00:00Z","files":0,"dirs":0,"symlinks":0,"bytes":0,"new_bytes":0,"new_chunks":0,"entries":[`
	zw.Write([]byte(head))
	if _, err := io.Copy(zw, io.LimitReader(spaces{}, 257<<20)); err != nil {
		t.Fatal(err)
	}
	zw.Write([]byte("]}"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	objs := map[string][]byte{
		"corrupt/1": []byte("not a manifest"),
		"bomb/1":    bomb.Bytes(),
		"a/3":       mustRead(t, filepath.Join(dir, "snapshots", "a", "1")),
	}
	var names []string
	for name, data := range objs {
		p := filepath.Join(dir, "snapshots", filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStoreWidePassOverBrokenManifests: List, Verify and Prune name
// every manifest that cannot be read, by key and snapshot, and handle the
// other keys as if it were not there.
func TestStoreWidePassOverBrokenManifests(t *testing.T) {
	ctx := context.Background()
	s, dir := diskStore(t)
	src := filepath.Join(t.TempDir(), "src")
	transcripts(t, src, 9, 3, 32<<10)
	save(t, s, "a", src)
	appendTo(t, filepath.Join(src, "sessions", "2026", "rollout-00.jsonl"), 1, 1000)
	save(t, s, "a", src)
	save(t, s, "b", src)
	broken := brokenManifests(t, dir)

	list, err := s.List(ctx, "")
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	var good, bad []string
	for _, i := range list {
		ref := fmt.Sprintf("%s/%d", i.Key, i.Seq)
		if i.Err != "" {
			bad = append(bad, ref)
		} else {
			good = append(good, ref)
		}
	}
	if !slices.Equal(good, []string{"a/1", "a/2", "b/1"}) || !slices.Equal(bad, broken) {
		t.Fatalf("list: %v listed, %v unreadable; want a/1 a/2 b/1 and %v", good, bad, broken)
	}

	rep, err := s.Verify(ctx, "")
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	bad = nil
	for _, b := range rep.Broken {
		if !strings.Contains(b.Err, session.ErrManifest.Error()) {
			t.Errorf("verify: %s broken for %q, want an invalid manifest", b.SnapshotRef, b.Err)
		}
		bad = append(bad, b.SnapshotRef.String())
	}
	if rep.Snapshots != 3 || !slices.Equal(bad, broken) || len(rep.Missing)+len(rep.Corrupt) != 0 || rep.Chunks == 0 {
		t.Fatalf("verify: %d snapshots, broken %v, %d missing, %d corrupt; want 3 read and %v broken", rep.Snapshots, bad, len(rep.Missing), len(rep.Corrupt), broken)
	}

	pr, err := s.Prune(ctx, session.PruneOptions{Keep: 1})
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	bad = nil
	for _, u := range pr.Unreadable {
		bad = append(bad, u.SnapshotRef.String())
	}
	slices.Sort(bad)
	if !slices.Equal(bad, broken) || len(pr.Snapshots) != 1 || pr.Snapshots[0] != (session.SnapshotRef{Key: "a", Seq: 1}) {
		t.Fatalf("prune --keep 1: removed %v, unreadable %v; want a/1 removed and %v named", pr.Snapshots, bad, broken)
	}
	// a's newest, 3, is one of the broken.
	for key, seq := range map[string]int64{"a": 2, "b": 0} {
		dst := filepath.Join(t.TempDir(), key)
		restore(t, s, key, dst, session.RestoreOptions{Seq: seq})
		transfertest.EqualTrees(t, src, dst)
	}
}

// TestConfigLimits: a store refuses limits a restore could not apply, and
// takes archive's defaults for the fields left zero.
func TestConfigLimits(t *testing.T) {
	b, err := local.NewDir(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := session.New(session.Config{Backend: b, Limits: archive.Limits{MaxEntries: -1}}); err == nil {
		t.Fatal("a negative limit was accepted")
	}
	// Only MaxEntries lowered: a save of two entries is refused at the
	// second (the restore's root is the third), one of one passes.
	s, err := session.New(session.Config{Backend: b, Limits: archive.Limits{MaxEntries: 2}})
	if err != nil {
		t.Fatal(err)
	}
	one := t.TempDir()
	if err := os.WriteFile(filepath.Join(one, "a"), []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(context.Background(), "one", session.DirSource{Dir: one}); err != nil {
		t.Fatalf("save of one file under MaxEntries 2: %v", err)
	}
	if err := os.WriteFile(filepath.Join(one, "b"), []byte("b"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(context.Background(), "two", session.DirSource{Dir: one}); !errors.Is(err, archive.ErrLimit) {
		t.Fatalf("save of two files under MaxEntries 2: %v, want archive.ErrLimit", err)
	}
}
