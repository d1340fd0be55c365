package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay/local"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// agentPid finds the agent this test dialled: the process running a
// binary from the test's own temp dir tmp, where Dial installed it.
func agentPid(t *testing.T, tmp string) int {
	t.Helper()
	for range 200 {
		exes, _ := filepath.Glob("/proc/[0-9]*/exe")
		for _, p := range exes {
			if exe, err := os.Readlink(p); err == nil && strings.HasPrefix(exe, tmp+"/") {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the agent process was not found")
	return 0
}

// stagedPut starts a Put of a few MiB into ws/out that stops, once
// streaming, until release is closed, and waits for the agent's staging
// directory to appear in ws. done gets Put's result.
func stagedPut(t *testing.T, c *agent.Client, ws string) (release chan struct{}, done chan error) {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "big"), noise(3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	release, done = make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := c.Put(context.Background(), agent.PutSpec{Dest: "out", Staging: archive.StagingPrefix + "0a0b0c0d"}, func(w *archive.Writer) error {
			if err := w.Add(context.Background(), src, "."); err != nil {
				return err
			}
			<-release
			return nil
		})
		done <- err
	}()
	for range 1000 {
		if m, _ := filepath.Glob(filepath.Join(ws, archive.StagingPrefix+"*", "tree", "big")); len(m) > 0 {
			return release, done
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	t.Fatal("no staging directory appeared")
	return nil, nil
}

// TestAgentRemovesStagingOnEveryEnd runs the real agent binary and ends
// it mid-Put in each way an exec ends: SIGTERM, SIGHUP, its stdin closed
// by the host. Each time the agent removes its staging directory before
// it exits. SIGKILL leaves it, and the next Put into the same directory
// removes it and reports one.
func TestAgentRemovesStagingOnEveryEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(c *agent.Client, pid int)
	}{
		{"SIGTERM", func(_ *agent.Client, pid int) { syscall.Kill(pid, syscall.SIGTERM) }},
		{"SIGHUP", func(_ *agent.Client, pid int) { syscall.Kill(pid, syscall.SIGHUP) }},
		{"stdin closed", func(c *agent.Client, _ int) { go c.Close() }},
		{"SIGKILL", func(_ *agent.Client, pid int) { syscall.Kill(pid, syscall.SIGKILL) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, tmp := t.TempDir(), t.TempDir()
			// The serve script execs the agent: it is this process's child.
			x, err := local.New(local.Config{Dir: ws, Env: append(os.Environ(), "TMPDIR="+tmp), Shell: []string{"/bin/sh", "-c", `eval "$0"`}})
			if err != nil {
				t.Fatal(err)
			}
			cfg := agent.DialConfig{X: x, Sandbox: "box", Bundle: agenttest.Bundle(t)}
			c, _, err := agent.Dial(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			pid := agentPid(t, tmp)
			release, done := stagedPut(t, c, ws)
			tc.end(c, pid)
			// The agent ends on its own; the rest of the stream comes only
			// after, so that the call cannot complete first.
			for i := 0; i < 1000 && syscall.Kill(pid, 0) == nil; i++ {
				time.Sleep(10 * time.Millisecond)
			}
			close(release)
			if err := <-done; err == nil {
				t.Fatal("Put succeeded with its agent ended")
			}
			c.Close() // waits for the exec to end: the agent has exited
			left, _ := filepath.Glob(filepath.Join(ws, ".ferry*"))
			if tc.name != "SIGKILL" {
				if len(left) != 0 {
					t.Fatalf("the agent ended by %s left %v", tc.name, left)
				}
				return
			}
			if len(left) != 1 {
				t.Fatalf("the killed agent left %v, want its staging directory", left)
			}
			c, _, err = agent.Dial(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			src := t.TempDir()
			if err := os.WriteFile(filepath.Join(src, "small"), []byte("s"), 0o644); err != nil {
				t.Fatal(err)
			}
			res, err := c.Put(context.Background(), agent.PutSpec{Dest: "next"}, addAll(src, "."))
			if err != nil {
				t.Fatal(err)
			}
			if res.StaleStaging != 1 {
				t.Errorf("the next Put reports %d stale staging directories removed, want 1", res.StaleStaging)
			}
			if got, _ := os.ReadDir(ws); len(got) != 1 || got[0].Name() != "next" {
				t.Fatalf("after the next Put the workspace holds %v, want [next]", got)
			}
		})
	}
}
