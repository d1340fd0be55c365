package ferry_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/treediff"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest/hostile"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// TestHostileAgentDiff: an agent that lies in its scan cannot make a
// workspace diff name a path outside the directory, name one twice, or
// hide a change. Each lie either fails the manifest naming the entry, or
// shows in the diff as what it is.
func TestHostileAgentDiff(t *testing.T) {
	h := newHostileBox(t, hostile.Scenario{}, false)
	work := filepath.Join(h.root, "work")
	write(t, work, map[string]string{"a.txt": "a\n", "mod.txt": "before\n", "sub/x": "x"})
	before, err := ferry.Manifest(ctx(t), h.sb, "work", treediff.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h.served(t)
	if e := before.Entries[1]; e.Path != "mod.txt" || e.Digest != treediff.DigestOf([]byte("before\n")) {
		t.Fatalf("entries %v", before.Entries)
	}

	for _, tc := range []struct {
		name     string
		s        hostile.Scenario
		sentinel error
		entry    string
	}{
		{"climbs out", hostile.Scenario{Extra: []hostile.Entry{{Path: "~a/../../../etc/passwd", Kind: "file"}}}, session.ErrAgent, "../etc/passwd"},
		{"twice", hostile.Scenario{Extra: []hostile.Entry{{Path: "~d", Kind: "dir"}, {Path: "~d", Kind: "dir"}}}, session.ErrAgent, "~d"},
		{"inside a file", hostile.Scenario{Extra: []hostile.Entry{{Path: "~f", Kind: "file"}, {Path: "~f/x", Kind: "file"}}}, treediff.ErrManifest, "~f/x"},
		{"symlink out", hostile.Scenario{Extra: []hostile.Entry{{Path: "~l", Kind: "symlink", Mode: 0o777, Target: "../../etc"}}}, archive.ErrLinkEscape, "~l"},
		{"absolute symlink", hostile.Scenario{Extra: []hostile.Entry{{Path: "~l", Kind: "symlink", Mode: 0o777, Target: "/etc/shadow"}}}, archive.ErrLinkEscape, "~l"},
		{"unchanged claim", hostile.Scenario{Extra: []hostile.Entry{{Path: "~u", Kind: "file"}}}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.lie(t, tc.s)
			m, err := ferry.Manifest(ctx(t), h.sb, "work", treediff.Options{})
			h.served(t)
			if tc.sentinel == nil {
				// A lie the rules cannot tell from the truth (an empty
				// file that is not there) is at least named in the diff.
				if err != nil {
					t.Fatal(err)
				}
				rep, err := ferry.Diff(before, m, treediff.Filter{})
				if err != nil || len(rep.Created) != 1 || rep.Created[0].Path != "~u" {
					t.Fatalf("diff %+v, %v; want ~u created", rep, err)
				}
				return
			}
			// session's checks name the entry in the message, the
			// manifest's in an *archive.EntryError.
			wantEntryErr(t, err, tc.sentinel, "")
			if !strings.Contains(err.Error(), "box:work") || !strings.Contains(err.Error(), tc.entry) {
				t.Errorf("err %v does not name box:work and %q", err, tc.entry)
			}
		})
	}

	// mod.txt is rewritten; the agent claims its old chunks. Its mtime
	// moved and its claimed digest did not, so the manifest reads it
	// through, and the real bytes do not hash to the claim.
	write(t, work, map[string]string{"mod.txt": "after!\n"})
	// "before\n" is one chunk: its digest is the hash of its one ID.
	id := sha256.Sum256([]byte("before\n"))
	claim := hostile.Claim{Path: "mod.txt", Chunks: []hostile.Chunk{{ID: hex.EncodeToString(id[:]), Size: 7}}}
	h.lie(t, hostile.Scenario{Claims: []hostile.Claim{claim}})
	_, err = ferry.Manifest(ctx(t), h.sb, "work", treediff.Options{Since: before})
	h.served(t)
	if !errors.Is(err, agent.ErrChanged) && !errors.Is(err, archive.ErrDigest) {
		t.Fatalf("err = %v; want the claimed digest of mod.txt refuted", err)
	}
	if !strings.Contains(err.Error(), "mod.txt") {
		t.Errorf("err %v does not name mod.txt", err)
	}

	// The agent leaves the changed file out: the diff says it is gone,
	// never that nothing happened.
	h.lie(t, hostile.Scenario{Omit: []string{"mod.txt"}})
	m, err := ferry.Manifest(ctx(t), h.sb, "work", treediff.Options{Since: before})
	h.served(t)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ferry.Diff(before, m, treediff.Filter{})
	if err != nil || len(rep.Deleted) != 1 || rep.Deleted[0].Path != "mod.txt" || rep.Totals.Modified != 0 {
		t.Fatalf("diff %+v, %v; want mod.txt named deleted", rep, err)
	}
}

// TestManifestLimits: a directory over the entry, file-size or total
// limit fails in each mode with archive.ErrLimit, naming the sandbox and
// the directory.
func TestManifestLimits(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.SandboxEnv(t, c, "box", map[string]string{"TMPDIR": t.TempDir()})
	write(t, filepath.Join(g.Root, "box", "work"), map[string]string{"a": "1", "b": "22", "c/": "", "c/d": "333", "e": "4444"})
	if err := os.WriteFile(filepath.Join(g.Root, "box", "work", "big"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []transfer.Mode{transfer.ModeAgent, transfer.ModePOSIX} {
		sb := sandboxFor(t, c, mode)
		for _, lim := range []archive.Limits{{MaxEntries: 3}, {MaxFileSize: 1000}, {MaxTotalBytes: 1 << 19}} {
			_, err := ferry.Manifest(ctx(t), sb, "work", treediff.Options{Limits: lim})
			if !errors.Is(err, archive.ErrLimit) || !strings.Contains(err.Error(), "box:work") {
				t.Errorf("%v mode, %+v: err = %v; want archive.ErrLimit naming box:work", mode, lim, err)
			}
		}
		m, err := ferry.Manifest(ctx(t), sb, "work", treediff.Options{})
		if err != nil || len(m.Entries) != 6 {
			t.Fatalf("%v mode: %v, %v; want 6 entries", mode, m, err)
		}
	}
}
