package ferry_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ferry-dev/ferry/session/treediff"
)

// TestLauncherDiff: a detached run with Diff lists the directories
// before its command and at its finish, by another Launcher than the one
// that started it, and writes exactly what the command changed to the run
// directory's workspace-diff.json: the meta directory's input rewritten
// and chmodded, a file created and one deleted, and work/repo, which the
// command creates, all created; the filter keeps runner.log out.
func TestLauncherDiff(t *testing.T) {
	e := newLaunchEnv(t)
	spec := newRun(t, e.runs, "diffed", nil)
	spec.Argv = []string{"sh", "-c", `set -e
echo changed >> rascal-meta/instructions.md
chmod 600 rascal-meta/context.json
rm rascal-meta/persistent_instructions.md
mkdir -p work/repo/src && echo 'package main' > work/repo/src/main.go
echo '{"exit_code":0}' > rascal-meta/meta.json`}
	spec.Diff = []string{"rascal-meta", "work/repo"}
	spec.DiffFilter = treediff.Filter{Exclude: []string{"runner.log"}}
	h, err := newLauncher(t, e.c, e.runs, e.st).StartDetached(ctx(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	if st := inspectUntilDone(t, newLauncher(t, e.c, e.runs, e.st), h); st.ExitCode != 0 {
		t.Fatalf("run ended %+v", st)
	}
	b, err := os.ReadFile(filepath.Join(e.runs, "diffed", treediff.DocumentFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc treediff.Document
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Dirs) != 2 {
		t.Fatalf("%d directories in the diff, want 2:\n%s", len(doc.Dirs), b)
	}
	paths := func(cs []*treediff.Change) (out []string) {
		for _, c := range cs {
			out = append(out, c.Path+":"+fmtChanged(c.Changed))
		}
		return out
	}
	meta, repo := doc.Dirs[0], doc.Dirs[1]
	if meta.Error != "" || repo.Error != "" {
		t.Fatalf("diff errors: %q, %q", meta.Error, repo.Error)
	}
	for _, tc := range []struct {
		what      string
		got, want []string
	}{
		{"meta created", paths(meta.Created), []string{"meta.json:"}},
		{"meta modified", paths(meta.Modified), []string{"context.json:mode", "instructions.md:content"}},
		{"meta deleted", paths(meta.Deleted), []string{"persistent_instructions.md:"}},
		{"repo created", paths(repo.Created), []string{"src:", "src/main.go:"}},
		{"repo modified", paths(repo.Modified), nil},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.what, tc.got, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(e.runs, "diffed", ".ferry-diff")); !os.IsNotExist(err) {
		t.Errorf("the before manifests outlived the finish: %v", err)
	}
}

func fmtChanged(c []string) string {
	out := ""
	for i, s := range c {
		if i > 0 {
			out += ","
		}
		out += s
	}
	return out
}
