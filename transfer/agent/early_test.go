package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// remembering is a memory that has sandbox.
func remembering(sandbox string) agent.Memory {
	m := agent.NewMemory()
	m.Remember(sandbox, true)
	return m
}

// counting counts the execs of the scripts Dial runs, by their last
// argument: "serve", "probe", or the install's encoding.
type counting struct {
	relay.Execer
	mu sync.Mutex
	n  map[string]int
}

func (c *counting) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[cmd.Argv[len(cmd.Argv)-1]]++
	c.mu.Unlock()
	return c.Execer.Exec(ctx, cmd)
}

func (c *counting) count(what string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[what]
}

// installed dials once the slow way, so that the sandbox has our agent.
func installed(t *testing.T, cfg agent.DialConfig) {
	t.Helper()
	c, _, err := agent.Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// dialed dials cfg, and closes the client when t ends.
func dialed(t *testing.T, cfg agent.DialConfig) (*agent.Client, agent.Dialled) {
	t.Helper()
	c, d, err := agent.Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, d
}

// files writes each name into dir, holding its name.
func files(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// callFirst holds back the agent's output until the host has sent, after
// its hello and HTTP/2 preface, a HEADERS frame: a call. A host that
// waited for the agent's hello before its first call would wait forever;
// the hold ends after a bound, and says whether it saw the call first.
type callFirst struct {
	relay.Execer
	waited atomic.Bool // the hold ended by its bound, not by a call
}

func (c *callFirst) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	call := make(chan struct{})
	var once sync.Once
	var seen bytes.Buffer
	in := cmd.Stdin
	cmd2 := *cmd
	cmd2.Stdin = readerFunc(func(p []byte) (int, error) {
		n, err := in.Read(p)
		seen.Write(p[:n])
		if hasHeaders(seen.Bytes()) {
			once.Do(func() { close(call) })
		}
		return n, err
	})
	out := cmd.Stdout
	cmd2.Stdout = writerFunc(func(p []byte) (int, error) {
		select {
		case <-call:
		case <-time.After(5 * time.Second):
			c.waited.Store(true)
		}
		return out.Write(p)
	})
	return c.Execer.Exec(ctx, &cmd2)
}

// hasHeaders reports whether b, the host's stream, holds its hello, the
// HTTP/2 preface and then a HEADERS frame.
func hasHeaders(b []byte) bool {
	const hello, preface = 42, 24
	if len(b) < hello+preface {
		return false
	}
	for p := b[hello+preface:]; len(p) >= 9; {
		if p[3] == 0x1 {
			return true
		}
		n := int(p[0])<<16 | int(p[1])<<8 | int(p[2])
		if len(p) < 9+n {
			return false
		}
		p = p[9+n:]
	}
	return false
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestEarlyDialCallsFirst: in a sandbox the memory says has our agent,
// Dial takes one exec and returns at once, and the first call leaves
// with the host's hello, before the agent has said a word; the agent it
// reaches answers it.
func TestEarlyDialCallsFirst(t *testing.T) {
	cfg, ws, _ := sandboxWS(t, true)
	installed(t, cfg)
	cf := &callFirst{Execer: cfg.X}
	cfg.X, cfg.Memory = cf, remembering(cfg.Sandbox)
	files(t, ws, "f")
	ctx := context.Background()
	c, d := dialed(t, cfg)
	if d.Execs != 1 || d.Installed {
		t.Errorf("dial = %+v, want 1 exec, no install", d)
	}
	k, err := c.Stat(ctx, "f", false)
	if err != nil || k != archive.File {
		t.Fatalf("stat = %v, %v; want a file", k, err)
	}
	if cf.waited.Load() {
		t.Fatal("the agent spoke before the host's first call came: the call waited for the hello")
	}
	if want := cfg.Bundle[runtime.GOARCH].Digest; c.Hello.Digest != want {
		t.Errorf("hello %v, want our digest", c.Hello)
	}
}

// TestEarlyDialInstalls: where the memory is wrong (no agent cached, or
// a stale build under our key), the calls that went early, at once from
// several goroutines, are made again on the agent the client installs,
// once, and answered there; a call that waits for the hello (Remove)
// goes there too.
func TestEarlyDialInstalls(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(map[bool]string{false: "none cached", true: "stale cached"}[stale], func(t *testing.T) {
			cfg, ws, tmp := sandboxWS(t, false)
			if stale {
				installed(t, cfg)
				plantStale(t, tmp)
			}
			cx := &counting{Execer: cfg.X}
			cfg.X, cfg.Memory = cx, remembering(cfg.Sandbox)
			files(t, ws, "f", "g")
			ctx := context.Background()
			c, d := dialed(t, cfg)
			if d.Execs != 1 {
				t.Errorf("dial = %+v, want 1 exec", d)
			}
			// Concurrent first calls: one redial, each answered.
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					k, err := c.Stat(ctx, "f", false)
					if err == nil && k != archive.File {
						err = errors.New("not a file")
					}
					errs[i] = err
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("stat %d: %v", i, err)
				}
			}
			if err := c.Remove(ctx, "g"); err != nil {
				t.Fatalf("remove: %v", err)
			}
			if _, err := os.Lstat(filepath.Join(ws, "g")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("g after remove: %v", err)
			}
			if want := cfg.Bundle[runtime.GOARCH].Digest; c.Hello.Digest != want {
				t.Errorf("hello %v, want our digest", c.Hello)
			}
			installs := 0
			for _, enc := range []string{"zstd", "gzip", "raw"} {
				installs += cx.count(enc)
			}
			if installs != 1 {
				t.Errorf("%d installs, want 1", installs)
			}
			if !cfg.Memory.Answered(cfg.Sandbox) {
				t.Error("the memory forgot a sandbox where the agent now answers")
			}
		})
	}
}

// TestEarlyDialUnavailable: where the memory is wrong and our agent
// cannot run, the first call says so with ErrUnavailable, every later
// one too, and the memory forgets the sandbox: the next Dial is not
// early, and auto mode falls back to POSIX mode there.
func TestEarlyDialUnavailable(t *testing.T) {
	cfg, _ := sandbox(t, false)
	cfg.Bundle = otherArchOnly(cfg.Bundle)
	cfg.Memory = remembering(cfg.Sandbox)
	ctx := context.Background()
	c, _ := dialed(t, cfg)
	for range 2 {
		if _, err := c.Stat(ctx, "f", false); !errors.Is(err, agent.ErrUnavailable) || !strings.Contains(err.Error(), "no agent build for Linux") {
			t.Fatalf("stat = %v, want ErrUnavailable saying there is no build", err)
		}
	}
	if err := c.Remove(ctx, "f"); !errors.Is(err, agent.ErrUnavailable) {
		t.Fatalf("remove = %v, want ErrUnavailable", err)
	}
	if cfg.Memory.Answered(cfg.Sandbox) {
		t.Error("the memory still has a sandbox where the agent cannot run")
	}
	if _, _, err := agent.Dial(ctx, cfg); !errors.Is(err, agent.ErrUnavailable) {
		t.Fatalf("next dial = %v, want ErrUnavailable from Dial itself", err)
	}
}

// TestEarlyDialPutGet: a Put (which waits for the hello) and a Get (which
// does not) round-trip a tree through an early client, whether or not
// the agent was cached.
func TestEarlyDialPutGet(t *testing.T) {
	for _, cached := range []bool{true, false} {
		t.Run(map[bool]string{true: "cached", false: "installed"}[cached], func(t *testing.T) {
			cfg, ws, _ := sandboxWS(t, false)
			if cached {
				installed(t, cfg)
			}
			cfg.Memory = remembering(cfg.Sandbox)
			ctx := context.Background()
			c, _ := dialed(t, cfg)
			want := bytes.Repeat([]byte("early "), 50000)
			src := t.TempDir()
			if err := os.WriteFile(filepath.Join(src, "f"), want, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Put(ctx, agent.PutSpec{Dest: "up"}, addAll(src, ".")); err != nil {
				t.Fatalf("put: %v", err)
			}
			got, err := os.ReadFile(filepath.Join(ws, "up", "f"))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("put wrote %d bytes (%v), want %d", len(got), err, len(want))
			}
			c2, _ := dialed(t, cfg)
			dst := filepath.Join(t.TempDir(), "out")
			if _, err := c2.Get(ctx, agent.GetSpec{Dir: "up", Names: []string{"f"}, Local: dst}); err != nil {
				t.Fatalf("get: %v", err)
			}
			got, err = os.ReadFile(filepath.Join(dst, "f"))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("get read %d bytes (%v), want %d", len(got), err, len(want))
			}
		})
	}
}

// TestEarlyScanReplays: a Scan whose first batch of known files went
// early is made again on the agent the client installs with that batch
// as it was sent, although Scan reuses the batch's slice for the next:
// the files the first batch names come back unchanged.
func TestEarlyScanReplays(t *testing.T) {
	cfg, ws, _ := sandboxWS(t, false)
	cfg.Memory = remembering(cfg.Sandbox)
	files(t, ws, "a", "b", "c")
	var known []agent.KnownFile
	for _, n := range []string{"a", "b", "c"} {
		fi, err := os.Stat(filepath.Join(ws, n))
		if err != nil {
			t.Fatal(err)
		}
		known = append(known, agent.KnownFile{Path: n, Size: fi.Size(), MTime: fi.ModTime().UnixNano()})
	}
	// More than a batch (2048), so that a second one is built in the
	// first one's slice before the hello is in.
	for i := range 2100 {
		known = append(known, agent.KnownFile{Path: fmt.Sprintf("gone/%05d", i), Size: 1})
	}
	c, _ := dialed(t, cfg)
	for _, e := range scanAll(t, c, ".", known) {
		if !e.Unchanged {
			t.Errorf("%s: not unchanged, though the first batch knew it", e.Path)
		}
	}
}

// silent runs, in place of every command, one that reads its stdin and
// says nothing until it ends: a sandbox that never answers.
type silent struct{ relay.Execer }

func (s silent) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	c := *cmd
	c.Argv = []string{"sh", "-c", "cat >/dev/null"}
	return s.Execer.Exec(ctx, &c)
}

// TestDialSilentSandbox: in a sandbox that never answers, a Dial ends
// with its context, and so does an early client's first call; nothing
// is left running (TestMain's goleak).
func TestDialSilentSandbox(t *testing.T) {
	for _, early := range []bool{false, true} {
		t.Run(map[bool]string{false: "hello-first", true: "early"}[early], func(t *testing.T) {
			cfg, _ := sandbox(t, false)
			cfg.X = silent{cfg.X}
			if early {
				cfg.Memory = remembering(cfg.Sandbox)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			c, _, err := agent.Dial(ctx, cfg)
			if early {
				if err != nil {
					t.Fatalf("early dial: %v", err)
				}
				_, err = c.Stat(ctx, "f", false)
				c.Close()
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want the context's deadline", err)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("took %v to give up", took)
			}
		})
	}
}
