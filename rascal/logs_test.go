package rascal_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRascalLiveLogs: while rascald supervises a run (Inspect every
// tick), what the worker has written to runner.log is in the run
// directory, where `rascal logs` reads it, before the run ends; at the
// end it is the whole log.
func TestRascalLiveLogs(t *testing.T) {
	e := newEnv(t)
	rn := run{ID: "run_00000000000000c3", TaskID: "live", Repo: testRepo, Instruction: "x", AgentRuntime: "codex", Trigger: "cli", BaseBranch: "main", HeadBranch: "rascal/live"}
	must(t, os.WriteFile(e.f.hold(rn.TaskID), nil, 0o644))
	d := e.rascald(t, e.runner(t, nil), "off")
	c, cancel := context.WithCancel(ctx(t))
	defer cancel()
	done := make(chan outcome, 1)
	go func() { done <- d.execute(c, rn) }()
	waitFile(t, e.f.running(rn.ID))

	// The worker is held inside the agent: only the sandbox has its
	// first line until the live copy brings it.
	log := filepath.Join(d.runDir(rn.ID), "runner.log")
	const first = "starting rascal-runner"
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(readFile(t, log), first) {
		if time.Now().After(deadline) {
			t.Fatalf("the run directory's runner.log lacks %q during the run:\n%s", first, readFile(t, log))
		}
		time.Sleep(20 * time.Millisecond)
	}
	live := readFile(t, log)
	select {
	case o := <-done:
		t.Fatalf("the run ended while held: %+v", o)
	default:
	}
	must(t, os.Remove(e.f.hold(rn.TaskID)))
	if o := <-done; o.Status != "review" {
		t.Fatalf("run: %+v", o)
	}
	final := readFile(t, log)
	if !strings.HasPrefix(final, live) || len(final) <= len(live) || !strings.Contains(final, "run completed") {
		t.Fatalf("the live runner.log is not a strict prefix of the final one:\nlive:\n%s\nfinal:\n%s", live, final)
	}
}
