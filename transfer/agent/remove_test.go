package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferry-dev/ferry/transfer/agent"
)

func TestRemove(t *testing.T) {
	c, ws := inProcess(t)
	outside := t.TempDir()
	mustFile(t, filepath.Join(outside, "keep"), "keep")
	mustFile(t, filepath.Join(ws, "file"), "f")
	mustFile(t, filepath.Join(ws, "tree", "ro", "f"), "f")
	if err := os.Chmod(filepath.Join(ws, "tree", "ro"), 0o500); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	mustFile(t, filepath.Join(ws, "stay"), "stay")
	if err := c.Remove(context.Background(), "file", filepath.Join(ws, "tree"), "link", "missing", "missing/below"); err != nil {
		t.Fatal(err)
	}
	if got := listDir(t, ws); len(got) != 1 || got[0] != "stay" {
		t.Errorf("workspace holds %q", got)
	}
	if got := listDir(t, outside); len(got) != 1 {
		t.Errorf("Remove followed the symlink: %q", got)
	}

	for _, tc := range []struct {
		name  string
		paths []string
	}{
		{"workspace", []string{"."}},
		{"workspace spelled otherwise", []string{"stay/.."}},
		{"root", []string{"/"}},
		{"empty", []string{""}},
		{"NUL", []string{"a\x00"}},
		{"one bad of two", []string{"stay", "/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.Remove(context.Background(), tc.paths...); !errors.Is(err, agent.ErrInvalidPath) {
				t.Fatalf("err = %v, want ErrInvalidPath", err)
			}
			if got := listDir(t, ws); len(got) != 1 {
				t.Errorf("workspace holds %q", got)
			}
		})
	}
	if err := c.Remove(context.Background()); err != nil {
		t.Errorf("no paths: %v", err)
	}
}
