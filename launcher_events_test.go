package ferry_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry"
)

// TestLauncherEvents: a Launcher run's finish writes the sandbox's OCSF
// events into the run directory, and Events gives them, also once the
// run is removed: the gateway's process events of
// the run's execs, observed, without the run's secret; an unknown handle
// is ErrUnknownRun.
func TestLauncherEvents(t *testing.T) {
	e := newLaunchEnv(t)
	l := newLauncher(t, e.c, e.runs, e.st)
	h, err := l.StartDetached(ctx(t), newRun(t, e.runs, "events", nil))
	if err != nil {
		t.Fatal(err)
	}
	inspectUntilDone(t, l, h)
	path := filepath.Join(e.runs, "events", ferry.EventsFile)
	// The finish wrote them, and they outlive the sandbox.
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no events after the finish: %v", err)
	}
	if err := l.Remove(ctx(t), h); err != nil {
		t.Fatal(err)
	}
	res, err := l.Events(ctx(t), h)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != ferry.EventsObserved || res.Path != path || res.Counts == nil || res.Counts.Process.Total < 2 {
		t.Fatalf("events %+v; want observed process events in %s", res, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != res.Counts.Process.Total+res.Counts.Network.Total+res.Counts.Finding.Total+res.Counts.Other.Total {
		t.Errorf("%d lines for counts %+v", n, res.Counts)
	}
	if !strings.Contains(string(b), `"activity":"launch"`) || strings.Contains(string(b), testSecret) {
		t.Errorf("ocsf.ndjson: want launches and not the secret:\n%s", b)
	}
	if _, err := l.Events(ctx(t), ferry.Handle{Name: "rascal-never"}); !errors.Is(err, ferry.ErrUnknownRun) {
		t.Fatalf("events of an unknown run: %v", err)
	}
}
