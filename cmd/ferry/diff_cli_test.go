package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/session/treediff"
)

// seedWorkspace writes the tree every diff test starts from into the
// sandbox directory dir (on the gateway's disk).
func seedWorkspace(t *testing.T, dir string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "keep.txt"), []byte("unchanged\n"), 0o644)
	writeFile(t, filepath.Join(dir, "mod.txt"), []byte("one\ntwo\nthree\n"), 0o644)
	writeFile(t, filepath.Join(dir, "tool.sh"), []byte("#!/bin/sh\n"), 0o644)
	writeFile(t, filepath.Join(dir, "gone.txt"), []byte("bye\n"), 0o644)
	writeFile(t, filepath.Join(dir, "sub", "a.txt"), []byte("a\n"), 0o644)
	writeFile(t, filepath.Join(dir, "sub", "b.txt"), []byte("b\n"), 0o644)
	if err := os.Symlink("sub/a.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
}

// agentChange is the command that changes the seeded tree: a file
// created, one rewritten, one made executable, a symlink retargeted, a
// file deleted, and a file rewritten with its own bytes (no change).
const agentChange = `cd work && echo new > new.txt && printf 'one\nTWO\nthree\n' > mod.txt && chmod 755 tool.sh && ln -sfn sub/b.txt link && rm gone.txt && cp keep.txt k && mv k keep.txt && mkdir -p ../rascal-meta && echo '{}' > ../rascal-meta/meta.json`

// changeLine is one change as the test compares it.
type changeLine struct {
	Path    string
	Changed string
}

func changesOf(r *treediff.Report) (created, deleted, modified []changeLine) {
	for _, c := range r.Created {
		created = append(created, changeLine{c.Path, ""})
	}
	for _, c := range r.Deleted {
		deleted = append(deleted, changeLine{c.Path, ""})
	}
	for _, c := range r.Modified {
		modified = append(modified, changeLine{c.Path, strings.Join(c.Changed, ",")})
	}
	return
}

// TestRunDiff is `ferry run --diff` through the embedded gateway in each
// mode: the diff says exactly what the command changed, both modes give
// the same diff (digests included), and the summary is in the output and
// --json. Agent mode moves no file content to take it; POSIX mode says it
// did.
func TestRunDiff(t *testing.T) {
	g := activeGateway(t)
	reports := map[string]*treediff.Report{}
	for _, mode := range []string{"agent", "posix"} {
		t.Run(mode, func(t *testing.T) {
			box := "diff-" + mode
			wantOK(t, runFerry(t, nil, "-q", "sandbox", "create", box))
			seedWorkspace(t, filepath.Join(g.Root, box, "work"))
			out := t.TempDir()
			r := runFerry(t, nil, "--mode", mode, "run", box, "--diff", "work", "--follow=false", "--out", out, "--", "sh", "-c", agentChange)
			if r.code != 0 {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			wantSummary := "ferry: diff work: 1 created, 3 modified (1 content, 1 mode, 1 target), 1 deleted [" + mode + " mode"
			if !strings.Contains(r.stderr, wantSummary) {
				t.Fatalf("stderr %q; want the line %q", r.stderr, wantSummary)
			}
			var doc treediff.Document
			b, err := os.ReadFile(filepath.Join(out, treediff.DocumentFile))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			if len(doc.Dirs) != 1 || doc.Dirs[0].Dir != "work" {
				t.Fatalf("document %s; want one section, work", b)
			}
			rep := doc.Dirs[0]
			created, deleted, modified := changesOf(rep)
			if want := []changeLine{{"new.txt", ""}}; !reflect.DeepEqual(created, want) {
				t.Errorf("created %v; want %v", created, want)
			}
			if want := []changeLine{{"gone.txt", ""}}; !reflect.DeepEqual(deleted, want) {
				t.Errorf("deleted %v; want %v", deleted, want)
			}
			if want := []changeLine{{"link", "target"}, {"mod.txt", "content"}, {"tool.sh", "mode"}}; !reflect.DeepEqual(modified, want) {
				t.Errorf("modified %v; want %v", modified, want)
			}
			if rep.MovedContents != (mode == "posix") || rep.Mode != mode {
				t.Errorf("mode %q, moved_contents %v in %s mode", rep.Mode, rep.MovedContents, mode)
			}
			// keep.txt was rewritten with its own bytes: its mtime moved
			// and its digest did not, so its chunks were read and
			// checked; nothing else's content moved.
			if mode == "agent" && (rep.WireBytes == 0 || rep.WireBytes > int64(len("unchanged\n"))) {
				t.Errorf("agent mode moved %d bytes of content; want keep.txt's check only", rep.WireBytes)
			}
			if c := rep.Modified[1]; c.Before.Digest != treediff.DigestOf([]byte("one\ntwo\nthree\n")) || c.After.Digest != treediff.DigestOf([]byte("one\nTWO\nthree\n")) {
				t.Errorf("mod.txt digests %s -> %s; want those of its contents", c.Before.Digest, c.After.Digest)
			}
			if c := rep.Modified[2]; c.Before.Mode != 0o644 || c.After.Mode != 0o755 {
				t.Errorf("tool.sh mode %o -> %o", c.Before.Mode, c.After.Mode)
			}
			if c := rep.Modified[0]; c.Before.Target != "sub/a.txt" || c.After.Target != "sub/b.txt" {
				t.Errorf("link %q -> %q", c.Before.Target, c.After.Target)
			}
			reports[mode] = rep

			// --json carries each directory's totals; a command that
			// changes nothing diffs to nothing.
			r = runFerry(t, nil, "--json", "--mode", mode, "run", box, "--diff", "work", "--out", t.TempDir(), "--", "sh", "-c", "mkdir -p rascal-meta && echo '{}' > rascal-meta/meta.json")
			var res struct {
				Diff []struct {
					Dir    string          `json:"dir"`
					Totals treediff.Totals `json:"totals"`
					Error  string          `json:"error"`
				} `json:"diff"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != 0 {
				t.Fatalf("run --json: exit %d, %v: %s", r.code, err, r.stdout)
			}
			if len(res.Diff) != 1 || res.Diff[0].Dir != "work" || res.Diff[0].Error != "" || res.Diff[0].Totals.EntriesBefore == 0 ||
				res.Diff[0].Totals.Created+res.Diff[0].Totals.Modified+res.Diff[0].Totals.Deleted != 0 {
				t.Fatalf("run --json diff: %+v; want work unchanged", res.Diff)
			}
		})
	}
	a, p := reports["agent"], reports["posix"]
	if a == nil || p == nil {
		return
	}
	for _, l := range [][2][]*treediff.Change{{a.Created, p.Created}, {a.Deleted, p.Deleted}, {a.Modified, p.Modified}} {
		if !reflect.DeepEqual(l[0], l[1]) {
			ja, _ := json.Marshal(l[0])
			jp, _ := json.Marshal(l[1])
			t.Errorf("the modes differ:\nagent %s\nposix %s", ja, jp)
		}
	}
}

// TestDiffSince is `ferry diff --save` then `--since`, with globs, the
// content diffs and the JSON golden; and a --since manifest from a
// mode diffs against the other mode.
func TestDiffSince(t *testing.T) {
	g := activeGateway(t)
	wantOK(t, runFerry(t, nil, "-q", "sandbox", "create", "box"))
	seedWorkspace(t, filepath.Join(g.Root, "box", "work"))
	dir := t.TempDir()
	m := filepath.Join(dir, "before.json")
	wantOK(t, runFerry(t, nil, "-q", "--mode", "posix", "diff", "box:work", "--save", m, "--content"))
	r := runFerry(t, nil, "exec", "box", "--", "sh", "-c", agentChange)
	if r.code != 0 {
		t.Fatalf("exec: %d %q", r.code, r.stderr)
	}
	r = runFerry(t, nil, "--json", "--mode", "agent", "diff", "box:work", "--since", m, "--content", "--exclude", "tool.sh", "--out", filepath.Join(dir, "d.json"))
	wantOK(t, r)
	golden(t, filepath.Join("json", "diff.golden"), regexp.MustCompile(`"wire_bytes":\d+`).ReplaceAllString(r.stdout, `"wire_bytes":N`))
	var rep treediff.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Totals.Modified != 2 || rep.Modified[1].Path != "mod.txt" || !strings.Contains(rep.Modified[1].Diff, "-two\n+TWO\n") {
		t.Fatalf("report %s; want mod.txt's unified diff and tool.sh excluded", r.stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "d.json")); err != nil {
		t.Fatal(err)
	}

	// Usage: what cannot work is refused before the sandbox is reached.
	wantUsage(t, runFerry(t, nil, "diff", "box:work"), "--since")
	wantUsage(t, runFerry(t, nil, "diff", "box:work", "--since", m, "--include", "[bad"), "bad glob")
	wantUsage(t, runFerry(t, nil, "run", "box", "--diff-content", "--", "true"), "need --diff")

	// A --since file that lies is refused, naming the entry.
	bad := filepath.Join(dir, "bad.json")
	b, _ := os.ReadFile(m)
	writeFile(t, bad, []byte(strings.Replace(string(b), `"path": "keep.txt"`, `"path": "../keep.txt"`, 1)), 0o644)
	wantFailure(t, runFerry(t, nil, "diff", "box:work", "--since", bad), "../keep.txt", "invalid manifest")
}
