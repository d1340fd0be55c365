package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/local"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
)

// sandbox is a local "sandbox": a workspace and a private temp dir, run
// through a shell like a gateway's, optionally with a login banner.
func sandbox(t *testing.T, banner bool) (agent.DialConfig, string) {
	t.Helper()
	cfg, _, tmp := sandboxWS(t, banner)
	return cfg, tmp
}

// sandboxWS is sandbox, and its workspace too.
func sandboxWS(t *testing.T, banner bool) (cfg agent.DialConfig, ws, tmp string) {
	t.Helper()
	ws, tmp = t.TempDir(), t.TempDir()
	shell := []string{"/bin/sh", "-c", `eval "$0"`}
	if banner {
		shell = []string{"/bin/sh", "-c", `printf 'Welcome to the sandbox\nlast login: never\n'; eval "$0"`}
	}
	env := append(os.Environ(), "TMPDIR="+tmp)
	x, err := local.New(local.Config{Dir: ws, Env: env, Shell: shell})
	if err != nil {
		t.Fatal(err)
	}
	return agent.DialConfig{X: x, Sandbox: "box", Bundle: agenttest.Bundle(t)}, ws, tmp
}

func TestDialInstallsOnceThenReuses(t *testing.T) {
	for _, banner := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "banner"}[banner], func(t *testing.T) {
			ctx := context.Background()
			cfg, _ := sandbox(t, banner)
			c, d, err := agent.Dial(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Installed || d.Execs != 3 {
				t.Errorf("first dial = %+v, want installed in 3 execs", d)
			}
			p, err := c.Probe(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if p.Arch != runtime.GOARCH {
				t.Errorf("probe arch = %q", p.Arch)
			}
			if err := c.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			c, d, err = agent.Dial(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if d.Installed || d.Execs != 1 {
				t.Errorf("second dial = %+v, want the cached agent in 1 exec", d)
			}
		})
	}
}

// plantStale puts another build of the agent under the key of the one
// cached in the sandbox whose TMPDIR is tmp.
func plantStale(t *testing.T, tmp string) {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(tmp, ".ferry-*", "agent-*"))
	if len(matches) != 1 {
		t.Fatalf("cached agents: %v", matches)
	}
	if err := os.WriteFile(matches[0], agenttest.Raw(t, agenttest.BuildVersion(t, "stale")), 0o700); err != nil {
		t.Fatal(err)
	}
}

func TestDialReplacesStaleAgent(t *testing.T) {
	ctx := context.Background()
	cfg, tmp := sandbox(t, true)
	c, _, err := agent.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	plantStale(t, tmp)
	c, d, err := agent.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !d.Installed {
		t.Errorf("dial = %+v, want a reinstall", d)
	}
	if want := cfg.Bundle[runtime.GOARCH].Digest; c.Hello.Digest != want {
		t.Errorf("hello %v, want our digest", c.Hello)
	}
}

// TestDialPrunesOldBuilds: a sandbox whose cache holds older builds of
// the agent (ferry upgraded four times) keeps four after the new build is
// installed: the new one and the three most recently installed.
func TestDialPrunesOldBuilds(t *testing.T) {
	cfg, tmp := sandbox(t, false)
	dir := filepath.Join(tmp, fmt.Sprintf(".ferry-%d", os.Getuid()))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		p := filepath.Join(dir, fmt.Sprintf("agent-%024x", i))
		if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 1\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-time.Duration(10-i) * time.Hour)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	c, d, err := agent.Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if !d.Installed {
		t.Fatalf("dial = %+v, want an install", d)
	}
	got, _ := filepath.Glob(filepath.Join(dir, "agent-*"))
	for i := range got {
		got[i] = filepath.Base(got[i])
	}
	want := []string{fmt.Sprintf("agent-%024x", 1), fmt.Sprintf("agent-%024x", 2), fmt.Sprintf("agent-%024x", 3), cfg.Bundle[runtime.GOARCH].CacheName()}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("cached builds %q, want %q", got, want)
	}
}

func TestDialUnavailable(t *testing.T) {
	ctx := context.Background()
	cfg, _ := sandbox(t, false)
	tests := []struct {
		name   string
		bundle agent.Bundle
		want   string
	}{
		{"no builds", nil, "carries no agent"},
		{"other arch only", otherArchOnly(cfg.Bundle), "no agent build for Linux"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg.Bundle = tt.bundle
			_, _, err := agent.Dial(ctx, cfg)
			if !errors.Is(err, agent.ErrUnavailable) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrUnavailable saying %q", err, tt.want)
			}
		})
	}
}

// otherArchOnly is b's build for this machine, relabelled as the other
// architecture's, and nothing else: a bundle with no build for here.
func otherArchOnly(b agent.Bundle) agent.Bundle {
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	bin := b[runtime.GOARCH]
	bin.Arch = other
	return agent.Bundle{other: bin}
}

// TestDialDecoders installs through each encoding a sandbox may be able to
// decode: zstd when it has zstd, else gzip, else the raw binary.
func TestDialDecoders(t *testing.T) {
	tools := []string{"sh", "uname", "id", "mkdir", "chmod", "mv", "cat", "rm"}
	for _, tc := range []struct{ name, extra string }{{"zstd", "zstd"}, {"gzip", "gzip"}, {"raw", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			bin := t.TempDir()
			for _, tool := range append(tools, tc.extra) {
				if tool == "" {
					continue
				}
				p, err := exec.LookPath(tool)
				if err != nil {
					t.Skipf("no %s here", tool)
				}
				if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
					t.Fatal(err)
				}
			}
			ws, tmp := t.TempDir(), t.TempDir()
			x, err := local.New(local.Config{Dir: ws, Env: []string{"PATH=" + bin, "TMPDIR=" + tmp}, Shell: []string{"/bin/sh", "-c", `eval "$0"`}})
			if err != nil {
				t.Fatal(err)
			}
			var logs strings.Builder
			cfg := agent.DialConfig{X: x, Sandbox: "box", Bundle: agenttest.Bundle(t), Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}
			c, d, err := agent.Dial(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if !d.Installed || !strings.Contains(logs.String(), "encoding="+tc.name) {
				t.Fatalf("dial %+v, log %q: want an install encoded %s", d, logs.String(), tc.name)
			}
		})
	}
}

// TestDialConcurrentInstalls: several hosts installing into one fresh
// sandbox at once all end up talking to a whole agent.
func TestDialConcurrentInstalls(t *testing.T) {
	cfg, _ := sandbox(t, false)
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			c, _, err := agent.Dial(context.Background(), cfg)
			if err == nil {
				_, err = c.Probe(context.Background())
				if cerr := c.Close(); err == nil {
					err = cerr
				}
			}
			errs <- err
		}()
	}
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// endings wraps an Execer and counts how the agent's serve execs ended:
// cancelled by the host, or exited on their own.
type endings struct {
	relay.Execer
	cancelled, exited atomic.Int32
}

func (e *endings) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	code, err := e.Execer.Exec(ctx, cmd)
	if cmd.Argv[len(cmd.Argv)-1] == "serve" {
		if ctx.Err() != nil {
			e.cancelled.Add(1)
		} else {
			e.exited.Add(1)
		}
	}
	return code, err
}

// lateOutput is an Execer whose serve commands write to their stdout once
// more after the command ended: a relay delivering the agent's last bytes
// after the host has stopped reading (1 MiB: more than the connection's
// reader, were it still reading, takes before the garbage stops it).
type lateOutput struct{ relay.Execer }

func (l lateOutput) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	code, err := l.Execer.Exec(ctx, cmd)
	if cmd.Argv[len(cmd.Argv)-1] == "serve" {
		cmd.Stdout.Write(bytes.Repeat([]byte("late"), 1<<18))
	}
	return code, err
}

// TestCloseSettledLateOutput: a settled Close does not wait on output
// nobody reads any more.
func TestCloseSettledLateOutput(t *testing.T) {
	ctx := context.Background()
	cfg, _ := sandbox(t, false)
	cfg.X = lateOutput{cfg.X}
	c, _, err := agent.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close blocked on output after the agent had answered every call")
	}
}

// TestCloseSettled: once the agent has answered every call (an error it
// sent is an answer), Close ends its exec at once instead of waiting a
// round trip for it to exit; after a call the host gave up on, whose
// handler may still be cleaning up, Close waits for the agent to exit by
// itself.
func TestCloseSettled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		calls   func(context.Context, *agent.Client, string) error
		settled bool
	}{
		{"Answered", func(ctx context.Context, c *agent.Client, _ string) error {
			_, err := c.Probe(ctx)
			return err
		}, true},
		{"AnsweredWithAnError", func(ctx context.Context, c *agent.Client, _ string) error {
			err := c.Follow(ctx, []agent.FollowFile{{Path: "."}}, "", func(int, int64, []byte) error { return nil })
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				return fmt.Errorf("follow a directory: %v, want it refused", err)
			}
			return nil
		}, true},
		{"NoCalls", func(context.Context, *agent.Client, string) error { return nil }, true},
		{"GivenUp", func(ctx context.Context, c *agent.Client, ws string) error {
			if err := os.WriteFile(filepath.Join(ws, "log"), []byte("line\n"), 0o644); err != nil {
				return err
			}
			stop := errors.New("enough")
			err := c.Follow(ctx, []agent.FollowFile{{Path: "log"}}, "", func(int, int64, []byte) error { return stop })
			if !errors.Is(err, stop) {
				return fmt.Errorf("follow: %v, want it stopped by the host", err)
			}
			return nil
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cfg, ws, _ := sandboxWS(t, false)
			installed, _, err := agent.Dial(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			installed.Close()
			e := &endings{Execer: cfg.X}
			cfg.X = e
			c, d, err := agent.Dial(ctx, cfg)
			if err != nil || d.Execs != 1 {
				t.Fatalf("dial: %v, %d execs; want the installed agent in 1", err, d.Execs)
			}
			if err := tc.calls(ctx, c, ws); err != nil {
				c.Close()
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			want := map[bool][2]int32{true: {1, 0}, false: {0, 1}}[tc.settled]
			if got := [2]int32{e.cancelled.Load(), e.exited.Load()}; got != want {
				t.Fatalf("serve execs cancelled, exited = %v, want %v", got, want)
			}
		})
	}
}
