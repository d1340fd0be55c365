package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
)

func TestStat(t *testing.T) {
	c, ws := inProcess(t)
	mustFile(t, filepath.Join(ws, "dir", "f"), "12345")
	mtime := time.Unix(1_700_000_000, 123456789)
	if err := os.Chmod(filepath.Join(ws, "dir", "f"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(ws, "dir", "f"), time.Time{}, mtime); err != nil {
		t.Fatal(err)
	}
	for _, l := range [][2]string{{"dir", "ldir"}, {"dir/f", "lfile"}, {"nowhere", "dangling"}, {"loop", "loop"}} {
		if err := os.Symlink(l[0], filepath.Join(ws, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path           string
		lstat, follows archive.Kind
	}{
		{"dir", archive.Dir, archive.Dir},
		{filepath.Join(ws, "dir"), archive.Dir, archive.Dir},
		{"dir/f", archive.File, archive.File},
		{"ldir", archive.Symlink, archive.Dir},
		{"lfile", archive.Symlink, archive.File},
		{"dangling", archive.Symlink, archive.Symlink},
		{"loop", archive.Symlink, archive.Symlink},
		{"fifo", archive.Other, archive.Other},
		{"missing", archive.Missing, archive.Missing},
		{"dir/f/below", archive.Missing, archive.Missing},
		{".", archive.Dir, archive.Dir},
	} {
		for _, follow := range []bool{false, true} {
			want := tc.lstat
			if follow {
				want = tc.follows
			}
			if got, err := c.Stat(context.Background(), tc.path, follow); err != nil || got != want {
				t.Errorf("Stat(%q, follow %v) = %v, %v; want %v", tc.path, follow, got, err, want)
			}
		}
	}

	es, err := c.StatAll(context.Background(), []string{"lfile", "missing", "dir/f"}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []agent.Entry{
		{Path: "lfile", Kind: archive.File, Size: 5, ModTime: mtime, Mode: 0o640},
		{Path: "missing", Kind: archive.Missing},
		{Path: "dir/f", Kind: archive.File, Size: 5, ModTime: mtime, Mode: 0o640},
	}
	for i := range want {
		if g := es[i]; g.Path != want[i].Path || g.Kind != want[i].Kind || g.Size != want[i].Size || !g.ModTime.Equal(want[i].ModTime) || g.Mode != want[i].Mode {
			t.Errorf("entry %d = %+v, want %+v", i, g, want[i])
		}
	}

	for _, p := range []string{"", "a\x00b", "a\rb"} {
		if _, err := c.Stat(context.Background(), p, false); !errors.Is(err, agent.ErrInvalidPath) {
			t.Errorf("Stat(%q): %v, want ErrInvalidPath", p, err)
		}
	}
	// The agent refuses on its own, too.
	if _, err := agent.RawRPC(c).Stat(context.Background(), statReq("a\x00b")); err == nil {
		t.Error("agent took a path with NUL")
	} else if code, reason, _ := statusReason(err); reason != "INVALID_PATH" {
		t.Errorf("agent: %v %q, want INVALID_PATH", code, reason)
	}
}

func statReq(paths ...string) *agentv1.StatRequest { return &agentv1.StatRequest{Paths: paths} }
