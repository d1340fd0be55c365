package proto_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// protocVersionLine is the one header line that records which protoc made a
// file. protoc is not pinned by go.mod, so a developer with another build of
// it would otherwise see a stale-code failure for a comment.
// protoc-gen-go writes "// \tprotoc        v3.21.12", protoc-gen-go-grpc
// writes "// - protoc             v3.21.12".
var protocVersionLine = regexp.MustCompile(`(?m)^// (?:\t|- )protoc +\S+\n`)

// TestGeneratedCodeIsFresh regenerates the Go code into a temporary directory
// and requires the committed files to match, so a .proto edit cannot land
// without the code that the rest of ferry compiles against.
func TestGeneratedCodeIsFresh(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("protoc is required in CI to check generated code: %v", err)
		}
		t.Skipf("protoc not on PATH, cannot check generated code: %v", err)
	}

	out := t.TempDir()
	cmd := exec.Command("bash", "gen.sh", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run gen.sh: %v\n%s", err, b)
	} else if len(b) > 0 {
		t.Logf("gen.sh said:\n%s", b)
	}

	committed := generatedFiles(t, ".")
	fresh := generatedFiles(t, filepath.Join(out, "proto"))

	if !slices.Equal(committed, fresh) {
		t.Fatalf("generated file set differs; run `bash proto/gen.sh`\n committed: %s\n generated: %s",
			strings.Join(committed, " "), strings.Join(fresh, " "))
	}
	var stale []string
	for _, rel := range committed {
		want := readGenerated(t, filepath.Join(out, "proto", rel))
		got := readGenerated(t, rel)
		if !bytes.Equal(got, want) {
			stale = append(stale, rel)
		}
	}
	if len(stale) > 0 {
		t.Errorf("generated code is stale; run `bash proto/gen.sh` and commit:\n  %s", strings.Join(stale, "\n  "))
	}
}

// generatedFiles lists the *.pb.go files below root, relative to it and
// sorted.
func generatedFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".pb.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatalf("list generated files in %s: %v", root, err)
	}
	slices.Sort(files)
	return files
}

func readGenerated(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read generated file: %v", err)
	}
	return protocVersionLine.ReplaceAll(b, nil)
}
