package ferry_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/transfer"
)

// logStub is a LogSource that answers lines, or err.
type logStub struct {
	lines []openshell.LogLine
	err   error
}

func (s logStub) SandboxLogs(context.Context, string) ([]openshell.LogLine, error) {
	return s.lines, s.err
}

// TestWriteEventsStates: a log that cannot be read, or no log at all, is
// the "unavailable" state with its reason (the sentinel for no log), and
// removes a stale ocsf.ndjson; a readable log without events is
// "observed" with zero counts and an empty file, which is another thing.
func TestWriteEventsStates(t *testing.T) {
	refused := errors.New("GetSandboxLogs refused")
	now := time.Now()
	for _, tc := range []struct {
		name    string
		src     ferry.LogSource
		state   string
		reason  string
		wantErr error
		events  int
		skipped int
	}{
		{"refused", logStub{err: refused}, ferry.EventsUnavailable, "GetSandboxLogs refused", refused, 0, 0},
		{"no source", nil, ferry.EventsUnavailable, "no gateway log", ferry.ErrNoLogSource, 0, 0},
		{"no events", logStub{lines: []openshell.LogLine{{Time: now, Level: "INFO", Message: "exec"}}}, ferry.EventsObserved, "", nil, 0, 0},
		{"events and junk", logStub{lines: []openshell.LogLine{
			{Time: now.Add(-time.Hour), Level: "OCSF", Target: "ocsf", Message: "PROC:LAUNCH [INFO] old(1)"},
			{Time: now, Level: "OCSF", Target: "ocsf", Message: "NET:OPEN [MED] DENIED curl(7) -> evil.example:443 [policy:- engine:opa] [reason:no matching policy]"},
			{Time: now, Level: "OCSF", Target: "ocsf", Message: "PROC:LAUNCH [INFO] sh(8) [cmd:sh]"},
			{Time: now, Level: "OCSF", Target: "ocsf", Message: `{"class_uid":"wrong type"}`},
		}}, ferry.EventsObserved, "", nil, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			path := filepath.Join(out, ferry.EventsFile)
			if err := os.WriteFile(path, []byte("stale\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			res := ferry.WriteEvents(context.Background(), tc.src, "box", out, now.Add(-time.Minute))
			if res.State != tc.state || !strings.Contains(res.Reason, tc.reason) {
				t.Fatalf("result %+v; want state %s, reason %q", res, tc.state, tc.reason)
			}
			_, _, err := ferry.Events(context.Background(), tc.src, "box", time.Time{})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Events: %v; want %v", err, tc.wantErr)
			}
			b, err := os.ReadFile(path)
			if tc.state == ferry.EventsUnavailable {
				if !os.IsNotExist(err) || res.Counts != nil || res.Path != "" || !strings.HasPrefix(res.Summary, "events unavailable: ") {
					t.Fatalf("unavailable: file %q (%v), result %+v; want no file, no counts", b, err, res)
				}
				return
			}
			if err != nil || res.Path != path || res.Counts == nil {
				t.Fatalf("observed: %v, result %+v", err, res)
			}
			if n := strings.Count(string(b), "\n"); n != tc.events || res.Counts.Skipped != tc.skipped ||
				res.Counts.Network.Denied+res.Counts.Process.Total != tc.events {
				t.Fatalf("file of %d lines, counts %+v; want %d events, %d skipped:\n%s", n, res.Counts, tc.events, tc.skipped, b)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %v (%v), want 0600", fi.Mode(), err)
			}
		})
	}
}

// shortTail is the gateway's log with a tail that lost all but its last
// record, as a long run's tail loses its first events; its follow is the
// gateway's own.
type shortTail struct{ *openshell.Client }

func (s shortTail) SandboxLogs(ctx context.Context, name string) ([]openshell.LogLine, error) {
	lines, err := s.Client.SandboxLogs(ctx, name)
	if len(lines) > 1 {
		lines = lines[len(lines)-1:]
	}
	return lines, err
}

// brokenFollow is the short tail, its follow failing at once.
type brokenFollow struct{ shortTail }

func (b brokenFollow) FollowLogs(context.Context, string, time.Time, func(openshell.LogLine), func(string)) error {
	return errors.New("watch refused")
}

// floodFollow is the gateway's log whose follow first streams more
// event bytes than a follow keeps, as a hostile sandbox could make it.
type floodFollow struct{ shortTail }

func (f floodFollow) FollowLogs(ctx context.Context, name string, since time.Time, fn func(openshell.LogLine), warn func(string)) error {
	big := "PROC:LAUNCH [INFO] x(1) [cmd:" + strings.Repeat("x", 1<<20) + "]"
	for range 80 {
		fn(openshell.LogLine{Time: time.Now(), Level: "OCSF", Target: "ocsf", Message: big})
	}
	return f.shortTail.Client.FollowLogs(ctx, name, since, fn, warn)
}

// TestRunFollowsEvents: ferry.Run follows the sandbox's log through the
// gateway's WatchSandbox while the command runs, so the events of its
// execs are all in ocsf.ndjson even when the tail read afterwards has
// lost them (followed); a follow that fails says so in the notes, and
// the result is only what the tail kept (not followed); a follow flooded
// past what it keeps says it dropped events (not followed).
func TestRunFollowsEvents(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	sb := sandboxVia(t, c, variant{Mode: transfer.ModeAgent})
	script := `mkdir -p rascal-meta; echo '{"exit_code":0}' > rascal-meta/meta.json; for i in 1 2 3; do sh -c true; done`
	for _, tc := range []struct {
		name     string
		logs     ferry.LogSource
		followed bool
		note     string
	}{
		{"followed", shortTail{c}, true, ""},
		{"follow refused", brokenFollow{shortTail{c}}, false, "live follow ended early: watch refused"},
		{"follow flooded", floodFollow{shortTail{c}}, false, "more dropped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			res, err := ferry.Run(ctx(t), sb, ferry.RunSpec{Argv: []string{"sh", "-c", script}, Out: out, Logs: tc.logs})
			if err != nil {
				t.Fatal(err)
			}
			ev := res.Events
			if ev == nil || ev.State != ferry.EventsObserved || ev.Followed != tc.followed {
				t.Fatalf("events %+v; want observed, followed %v", ev, tc.followed)
			}
			if tc.note != "" && !slices.ContainsFunc(ev.Notes, func(n string) bool { return strings.Contains(n, tc.note) }) {
				t.Fatalf("notes %q; want %q", ev.Notes, tc.note)
			}
			b, err := os.ReadFile(filepath.Join(out, ferry.EventsFile))
			if err != nil {
				t.Fatal(err)
			}
			// The run's own exec and the pre- and post-exec phases' each
			// launch and end; the tail alone holds one record.
			launches := strings.Count(string(b), `"activity":"launch"`)
			if tc.followed && launches < 2 {
				t.Fatalf("followed run: %d launches in ocsf.ndjson, want the run's execs:\n%s", launches, b)
			}
			if tc.name == "follow refused" && ev.Counts.Process.Total > 1 {
				t.Fatalf("unfollowed run: %d process events from a one-record tail", ev.Counts.Process.Total)
			}
		})
	}
}

// The gateway client follows logs: ferry run through a gateway follows.
var _ ferry.LogFollower = (*openshell.Client)(nil)

// TestRunEventsAfterFailedUpload: a run whose inputs cannot land still
// reports the sandbox's events, its own execs among them.
func TestRunEventsAfterFailedUpload(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	sb := sandboxVia(t, c, variant{Mode: transfer.ModePOSIX})
	if err := os.WriteFile(filepath.Join(g.Root, "box", "blocker"), []byte("a file"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(in, []byte("input"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "run")
	res, err := ferry.Run(ctx(t), sb, ferry.RunSpec{
		Inputs: []ferry.Mapping{{Local: in, Remote: "blocker/in.txt"}},
		Argv:   []string{"true"}, Out: out, Logs: c,
	})
	if err == nil {
		t.Fatal("a run whose input cannot land succeeded")
	}
	if ev := res.Events; ev == nil || ev.State != ferry.EventsObserved || ev.Counts.Process.Total == 0 {
		t.Fatalf("events of the failed run: %+v; want the upload's execs observed", ev)
	}
}

// pullGate holds every exec after the run's command until the log has
// been read: a run that reads the events only after its pull never
// pulls.
type pullGate struct {
	x       relay.Execer
	marker  string
	ran     atomic.Bool
	logs    chan struct{}
	once    sync.Once
	waited  atomic.Int32
	timeout time.Duration
}

func (g *pullGate) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	if slices.Contains(cmd.Argv, g.marker) {
		defer g.ran.Store(true)
		return g.x.Exec(ctx, cmd)
	}
	if g.ran.Load() {
		g.waited.Add(1)
		select {
		case <-g.logs:
		case <-time.After(g.timeout):
			return 0, errors.New("the pull waited for the log read, which waited for the pull")
		}
	}
	return g.x.Exec(ctx, cmd)
}

func (g *pullGate) SandboxLogs(context.Context, string) ([]openshell.LogLine, error) {
	g.once.Do(func() { close(g.logs) })
	return []openshell.LogLine{{Time: time.Now(), Level: "OCSF", Target: "ocsf", Message: "PROC:LAUNCH [INFO] sh(8) [cmd:sh]"}}, nil
}

// TestRunReadsEventsDuringPull: the events of a finished command are read
// while its artifacts are pulled, not after: the pull's execs wait for
// the log read here, and the run still gets both.
func TestRunReadsEventsDuringPull(t *testing.T) {
	e := newEnv(t, transfer.ModePOSIX)
	const marker = "the-command"
	gate := &pullGate{x: e.sb.X, marker: marker, logs: make(chan struct{}), timeout: 10 * time.Second}
	sb := e.sb
	sb.X = gate
	res, err := ferry.Run(ctx(t), sb, ferry.RunSpec{
		Argv: []string{"sh", "-c", `mkdir -p rascal-meta && echo '{}' > rascal-meta/meta.json`, marker},
		Out:  t.TempDir(),
		Logs: gate,
	})
	if err != nil || res.PullErr != nil {
		t.Fatalf("run: %v, pull: %v", err, res.PullErr)
	}
	if gate.waited.Load() == 0 {
		t.Fatal("no exec after the command: the gate was not exercised")
	}
	if res.Events == nil || res.Events.State != ferry.EventsObserved || res.Events.Counts.Process.Total != 1 {
		t.Fatalf("events %+v, want the one launch observed", res.Events)
	}
}
