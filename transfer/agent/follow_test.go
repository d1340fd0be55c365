package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/agent/server"
)

// collect gathers what Follow sends, per file, and checks that the pieces
// are contiguous from the requested offsets.
type collect struct {
	t    *testing.T
	next []int64
	data []bytes.Buffer
}

func newCollect(t *testing.T, files []agent.FollowFile) *collect {
	c := &collect{t: t, next: make([]int64, len(files)), data: make([]bytes.Buffer, len(files))}
	for i, f := range files {
		c.next[i] = f.Offset
	}
	return c
}

func (c *collect) fn(file int, off int64, data []byte) error {
	if off != c.next[file] {
		c.t.Errorf("file %d: piece at %d, want %d", file, off, c.next[file])
	}
	if len(data) > agent.ChunkSize {
		c.t.Errorf("file %d: piece of %d bytes, over ChunkSize", file, len(data))
	}
	c.next[file] += int64(len(data))
	c.data[file].Write(data)
	return nil
}

func appendFile(t *testing.T, name string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Error(err)
	}
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// grow appends lines to name in batches over about d, then creates stop.
// It runs on its own goroutine; wait for it with the returned func.
func grow(t *testing.T, name string, lines int, d time.Duration, stop string) (wait func()) {
	var wg sync.WaitGroup
	wg.Go(func() {
		const batches = 20
		for b := range batches {
			var buf bytes.Buffer
			for i := b * lines / batches; i < (b+1)*lines/batches; i++ {
				fmt.Fprintf(&buf, "line %d of %s\n", i, filepath.Base(name))
			}
			appendFile(t, name, buf.Bytes())
			time.Sleep(d / batches)
		}
		if stop != "" {
			appendFile(t, stop, nil)
		}
	})
	return wg.Wait
}

func TestFollowGrowing(t *testing.T) {
	ws := t.TempDir()
	c := agenttest.InProcess(t, server.Config{Workspace: ws})
	a := filepath.Join(ws, "a.log")
	// More than a chunk before the start: it arrives in several pieces.
	big := bytes.Repeat([]byte("0123456789abcde\n"), agent.ChunkSize/16*2+5)
	if err := os.WriteFile(a, big, 0o600); err != nil {
		t.Fatal(err)
	}
	files := []agent.FollowFile{{Path: "a.log", Offset: 3}, {Path: filepath.Join(ws, "b.log")}}
	wa := grow(t, a, 2000, 400*time.Millisecond, "")
	wb := grow(t, filepath.Join(ws, "b.log"), 500, 300*time.Millisecond, "")
	go func() {
		wa()
		wb()
		appendFile(t, filepath.Join(ws, "done"), nil)
	}()
	col := newCollect(t, files)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Follow(ctx, files, "done", col.fn); err != nil {
		t.Fatal(err)
	}
	if want := readFile(t, a)[3:]; !bytes.Equal(col.data[0].Bytes(), want) {
		t.Errorf("a.log: got %d bytes, want %d", col.data[0].Len(), len(want))
	}
	if want := readFile(t, filepath.Join(ws, "b.log")); !bytes.Equal(col.data[1].Bytes(), want) {
		t.Errorf("b.log: got %d bytes, want %d", col.data[1].Len(), len(want))
	}
}

// A file whose directory does not exist yet is picked up when both
// appear, woken by events: the whole stream takes less than the safety
// re-check interval (2s).
func TestFollowCreatedLate(t *testing.T) {
	ws := t.TempDir()
	c := agenttest.InProcess(t, server.Config{Workspace: ws})
	files := []agent.FollowFile{{Path: "meta/sub/late.log"}}
	go func() {
		time.Sleep(100 * time.Millisecond)
		if err := os.MkdirAll(filepath.Join(ws, "meta/sub"), 0o700); err != nil {
			t.Error(err)
			return
		}
		grow(t, filepath.Join(ws, "meta/sub/late.log"), 300, 200*time.Millisecond, filepath.Join(ws, "meta/sub/done"))()
	}()
	col := newCollect(t, files)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.Follow(ctx, files, "meta/sub/done", col.fn); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 1900*time.Millisecond {
		t.Errorf("follow took %v: woken by the re-check, not by events", d)
	}
	if want := readFile(t, filepath.Join(ws, "meta/sub/late.log")); !bytes.Equal(col.data[0].Bytes(), want) {
		t.Errorf("got %d bytes, want %d", col.data[0].Len(), len(want))
	}
}

func TestFollowStopAlreadyThere(t *testing.T) {
	ws := t.TempDir()
	c := agenttest.InProcess(t, server.Config{Workspace: ws})
	if err := os.WriteFile(filepath.Join(ws, "x"), []byte("hello\nworld"), 0o600); err != nil {
		t.Fatal(err)
	}
	appendFile(t, filepath.Join(ws, "done"), nil)
	files := []agent.FollowFile{{Path: "x", Offset: 6}, {Path: "missing"}}
	col := newCollect(t, files)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Follow(ctx, files, "done", col.fn); err != nil {
		t.Fatal(err)
	}
	if got := col.data[0].String(); got != "world" || col.data[1].Len() != 0 {
		t.Fatalf("got %q and %q", got, col.data[1].String())
	}
}

func TestFollowCancel(t *testing.T) {
	ws := t.TempDir()
	c := agenttest.InProcess(t, server.Config{Workspace: ws})
	appendFile(t, filepath.Join(ws, "x"), []byte("first\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.Follow(ctx, []agent.FollowFile{{Path: "x"}}, "", func(int, int64, []byte) error {
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	// The connection still serves after the stream is gone.
	if _, err := c.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestFollowShrunk(t *testing.T) {
	ws := t.TempDir()
	c := agenttest.InProcess(t, server.Config{Workspace: ws})
	x := filepath.Join(ws, "x")
	appendFile(t, x, []byte("0123456789"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nop := func(int, int64, []byte) error { return nil }

	t.Run("offset past the end", func(t *testing.T) {
		err := c.Follow(ctx, []agent.FollowFile{{Path: "x", Offset: 11}}, "", nop)
		if !errors.Is(err, agent.ErrShrunk) || agent.IsConnLost(err) {
			t.Fatalf("got %v, want ErrShrunk", err)
		}
	})
	t.Run("truncated while followed", func(t *testing.T) {
		err := c.Follow(ctx, []agent.FollowFile{{Path: "x"}}, "", func(_ int, off int64, data []byte) error {
			if off == 0 {
				return os.Truncate(x, 4)
			}
			return nil
		})
		if !errors.Is(err, agent.ErrShrunk) {
			t.Fatalf("got %v, want ErrShrunk", err)
		}
	})
	t.Run("replaced while followed", func(t *testing.T) {
		appendFile(t, x, []byte("456789"))
		err := c.Follow(ctx, []agent.FollowFile{{Path: "x"}}, "", func(_ int, off int64, data []byte) error {
			if off == 0 {
				tmp := filepath.Join(ws, "x.new")
				if err := os.WriteFile(tmp, []byte("0123456789"), 0o600); err != nil {
					return err
				}
				return os.Rename(tmp, x)
			}
			return nil
		})
		if !errors.Is(err, agent.ErrShrunk) {
			t.Fatalf("got %v, want ErrShrunk", err)
		}
	})
}

func TestFollowRefused(t *testing.T) {
	ws := t.TempDir()
	c := agenttest.InProcess(t, server.Config{Workspace: ws})
	if err := os.Mkdir(filepath.Join(ws, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nop := func(int, int64, []byte) error { return nil }
	for name, files := range map[string][]agent.FollowFile{
		"no files":        nil,
		"empty path":      {{Path: ""}},
		"newline in path": {{Path: "a\nb"}},
		"negative offset": {{Path: "a", Offset: -1}},
		"directory":       {{Path: "dir"}},
	} {
		err := c.Follow(ctx, files, "", nop)
		if err == nil || agent.IsConnLost(err) || errors.Is(err, agent.ErrShrunk) {
			t.Errorf("%s: got %v, want a refusal", name, err)
		}
	}
}

func TestFollowConnLost(t *testing.T) {
	ws := t.TempDir()
	c, cut := agenttest.Cuttable(t, server.Config{Workspace: ws})
	appendFile(t, filepath.Join(ws, "x"), []byte("first\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.Follow(ctx, []agent.FollowFile{{Path: "x"}}, "", func(int, int64, []byte) error {
		cut()
		return nil
	})
	if !agent.IsConnLost(err) {
		t.Fatalf("got %v, want a lost connection", err)
	}
}

// TestIsConnLost: an agent that died, however wrapped, is a lost
// connection a new one may retry; a refusal is not.
func TestIsConnLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"exited", fmt.Errorf("follow: %w", &agent.ExitedError{Code: 137, Stderr: "killed"}), true},
		{"relay", fmt.Errorf("follow: %w", relay.ErrRelayLost), true},
		{"shrunk", fmt.Errorf("follow: %w", agent.ErrShrunk), false},
		{"unavailable", agent.ErrUnavailable, false},
	} {
		if got := agent.IsConnLost(tc.err); got != tc.want {
			t.Errorf("%s: IsConnLost(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
	var xe *agent.ExitedError
	if err := fmt.Errorf("x: %w", &agent.ExitedError{Code: 1}); !errors.Is(err, agent.ErrExited) || !errors.As(err, &xe) || xe.Code != 1 {
		t.Fatalf("a wrapped ExitedError: Is ErrExited %v, As %v", errors.Is(err, agent.ErrExited), xe)
	}
}
