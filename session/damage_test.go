package session_test

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/afero"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// chunkPath is where a memory store keeps chunk id.
func chunkPath(id session.ID) string {
	s := id.String()
	return "chunks/" + s[:2] + "/" + s
}

func TestDamagedChunks(t *testing.T) {
	cases := []struct {
		name    string
		damage  func(fsys afero.Fs, id session.ID) error
		want    error
		missing bool
	}{
		{"missing", func(fsys afero.Fs, id session.ID) error { return fsys.Remove(chunkPath(id)) }, session.ErrChunkMissing, true},
		{"garbage", func(fsys afero.Fs, id session.ID) error {
			return afero.WriteFile(fsys, chunkPath(id), []byte("not zstd at all"), 0o600)
		}, session.ErrChunkCorrupt, false},
		{"other chunk", func(fsys afero.Fs, id session.ID) error {
			// A valid chunk under the wrong name: only the re-hash sees it.
			var other string
			afero.Walk(fsys, "chunks", func(p string, fi fs.FileInfo, err error) error {
				if err == nil && !fi.IsDir() && !strings.HasSuffix(p, id.String()) {
					other = p
				}
				return nil
			})
			data, err := afero.ReadFile(fsys, other)
			if err != nil {
				return err
			}
			return afero.WriteFile(fsys, chunkPath(id), data, 0o600)
		}, session.ErrChunkCorrupt, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, fsys := memStore(t)
			ctx := context.Background()
			src := t.TempDir()
			transfertest.RandomTree(t, src, 3, transfertest.TreeOptions{Entries: 40})
			transcripts(t, src, 4, 4, 300<<10)
			m1 := save(t, s, "k", src)
			other := t.TempDir()
			transcripts(t, other, 5, 2, 100<<10)
			save(t, s, "unrelated", other)
			// The last chunk of the largest file.
			var victim session.ID
			var victimFile string
			for _, e := range m1.Entries {
				if e.Kind == session.KindFile && len(e.Chunks) > 1 {
					victim, victimFile = e.Chunks[len(e.Chunks)-1].ID, e.Path
				}
			}
			if victimFile == "" {
				t.Fatal("no file with several chunks")
			}
			if err := tc.damage(fsys, victim); err != nil {
				t.Fatal(err)
			}

			rep, err := s.Verify(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			got := rep.Corrupt
			if tc.missing {
				got = rep.Missing
			}
			if rep.OK() || !slices.Equal(got, []session.ID{victim}) || len(rep.Missing)+len(rep.Corrupt) != 1 {
				t.Fatalf("verify: missing %v, corrupt %v; want only %s", rep.Missing, rep.Corrupt, victim)
			}
			if len(rep.Broken) != 1 || rep.Broken[0].Key != "k" || rep.Broken[0].Seq != 1 {
				t.Fatalf("verify: broken %+v, want only k/1", rep.Broken)
			}
			if rep, err := s.Verify(ctx, "unrelated"); err != nil || !rep.OK() {
				t.Errorf("verify of an undamaged key: %+v, %v", rep, err)
			}

			parent := t.TempDir()
			_, err = s.Restore(ctx, "k", filepath.Join(parent, "r"), session.RestoreOptions{})
			var ie *session.IntegrityError
			if !errors.Is(err, tc.want) || !errors.As(err, &ie) || !strings.Contains(err.Error(), victim.String()) {
				t.Fatalf("restore of a damaged snapshot: %v, want %v naming %s", err, tc.want, victim)
			}
			if names := dirNames(t, parent); len(names) != 0 {
				t.Errorf("a failed restore wrote %q", names)
			}
		})
	}
}

func TestDamagedManifest(t *testing.T) {
	s, fsys := memStore(t)
	ctx := context.Background()
	src := t.TempDir()
	transfertest.RandomTree(t, src, 3, transfertest.TreeOptions{Entries: 10})
	save(t, s, "k", src)
	save(t, s, "k", src)
	if err := afero.WriteFile(fsys, "snapshots/k/2", []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "k", 0); !errors.Is(err, session.ErrManifest) {
		t.Errorf("load of a damaged manifest: %v, want ErrManifest", err)
	}
	rep, err := s.Verify(ctx, "k")
	if err != nil || len(rep.Broken) != 1 || rep.Broken[0].Seq != 2 || rep.Broken[0].Err == "" {
		t.Errorf("verify: %+v, %v; want k/2 broken", rep, err)
	}
	// A manifest copied under another name is refused too.
	data, _ := afero.ReadFile(fsys, "snapshots/k/1")
	afero.WriteFile(fsys, "snapshots/k/5", data, 0o600)
	if _, err := s.Load(ctx, "k", 5); !errors.Is(err, session.ErrManifest) {
		t.Errorf("load of a moved manifest: %v, want ErrManifest", err)
	}
	// Prune names the damaged manifests, never counts them among the
	// kept (snapshot 1 is the newest readable one and stays), and a save
	// goes on past them.
	prep, err := s.Prune(ctx, session.PruneOptions{Keep: 1})
	if err != nil {
		t.Fatalf("prune with damaged manifests: %v", err)
	}
	var bad []string
	for _, u := range prep.Unreadable {
		bad = append(bad, u.SnapshotRef.String())
	}
	if !slices.Equal(bad, []string{"k/2", "k/5"}) || len(prep.Snapshots) != 0 {
		t.Errorf("prune: unreadable %q, removed %v; want k/2 and k/5 named and nothing removed", bad, prep.Snapshots)
	}
	restore(t, s, "k", filepath.Join(t.TempDir(), "one"), session.RestoreOptions{Seq: 1})
	m := save(t, s, "k", src)
	if m.Seq != 6 || m.Parent != 1 {
		t.Errorf("a save past damaged manifests committed %d from %d; want 6 from 1", m.Seq, m.Parent)
	}
	// With a readable newest, the damaged ones are past the one kept.
	if prep, err = s.Prune(ctx, session.PruneOptions{Keep: 1}); err != nil || len(prep.Snapshots) != 3 {
		t.Errorf("prune --keep 1 after the save: %+v, %v; want 1, 2 and 5 removed", prep, err)
	}
	if got := restore(t, s, "k", filepath.Join(t.TempDir(), "six"), session.RestoreOptions{}); got.Seq != 6 {
		t.Errorf("restored snapshot %d, want 6", got.Seq)
	}
}
