package main

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
)

// wantGone fails unless the gateway has no sandbox called name.
func wantGone(t *testing.T, g *gatewaytest.Gateway, name string) {
	t.Helper()
	c := g.Client(t, openshell.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, name); !errors.Is(err, relay.ErrNotFound) {
		t.Fatalf("sandbox %s after the run: %v; want not found", name, err)
	}
}

// TestRunDeleteExitPaths is `ferry run --create --delete` on each way a
// run can end: the sandbox is gone afterwards every time.
func TestRunDeleteExitPaths(t *testing.T) {
	g := activeGateway(t)
	local := t.TempDir()
	meta := `mkdir -p rascal-meta && echo '{}' > rascal-meta/meta.json`
	for _, tc := range []struct {
		name  string
		flags []string
		argv  []string
		code  int
		want  string // on stderr
	}{
		{"success", nil, []string{"sh", "-c", meta}, 0, ""},
		{"failure", nil, []string{"sh", "-c", meta + "; exit 5"}, 5, ""},
		{"timeout", []string{"--timeout", "1s"}, []string{"sleep", "30"}, 124, ""},
		{"upload", []string{"--in", filepath.Join(local, "missing") + ":x"}, []string{"true"}, 1, "missing"},
		// OUT/meta.json is a directory (made below): placing the pulled
		// meta.json fails after the command.
		{"pull", nil, []string{"sh", "-c", meta}, 1, "meta.json"},
		{"nometa", nil, []string{"true"}, exitNoMeta, "meta.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := "del-" + tc.name
			out := filepath.Join(t.TempDir(), "out")
			if tc.name == "pull" {
				writeFile(t, filepath.Join(out, "meta.json", "blocker"), nil, 0o644)
			}
			args := append([]string{"run", box, "--create", "default", "--delete", "--out", out}, tc.flags...)
			r := runFerry(t, nil, append(append(args, "--"), tc.argv...)...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d mentioning %q", r.code, r.stderr, tc.code, tc.want)
			}
			wantGone(t, g, box)
		})
	}

	// A mistake in the call touches nothing: no sandbox is created, and
	// one that exists is kept.
	wantOK(t, runFerry(t, nil, "-q", "sandbox", "create", "kept"))
	wantUsage(t, runFerry(t, nil, "--mode", "bogus", "run", "kept", "--delete", "--", "true"), "bogus")
	wantUsage(t, runFerry(t, nil, "--mode", "bogus", "run", "never", "--create", "default", "--delete", "--", "true"), "bogus")
	wantOK(t, runFerry(t, nil, "-q", "sandbox", "get", "kept"))
	wantGone(t, g, "never")
}

// TestRunDeleteInterrupt sends SIGINT to a ferry process (this test binary
// as ferry, with main's signal handling) while its command runs: ferry
// stops the command, pulls, exits 130, and the sandbox is gone.
func TestRunDeleteInterrupt(t *testing.T) {
	g := activeGateway(t)
	bundle := filepath.Join(t.TempDir(), "bundle.gob")
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(agenttest.Bundle(t)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, bundle, buf.Bytes(), 0o600)
	out := filepath.Join(t.TempDir(), "out")
	cmd := startFerry(t, bundle, "run", "intr", "--create", "default", "--delete", "--out", out, "--",
		"sh", "-c", `mkdir -p rascal-meta; echo '{}' > rascal-meta/meta.json; echo started > rascal-meta/started; exec sleep 30`)
	started := filepath.Join(g.Root, "intr", "rascal-meta", "started")
	for i := 0; ; i++ {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if i == 3000 {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("the command did not start within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("ferry did not exit within 30s of SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d after SIGINT, want 130; output %s", code, cmd.Stdout)
	}
	// The pull ran after the interrupt, then the delete.
	if _, err := os.Stat(filepath.Join(out, "meta.json")); err != nil {
		t.Fatalf("meta.json not pulled after SIGINT: %v", err)
	}
	wantGone(t, g, "intr")
}
