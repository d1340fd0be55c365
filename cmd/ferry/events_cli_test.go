package main

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell/ocsf"
)

const metaCmd = `mkdir -p rascal-meta && echo '{}' > rascal-meta/meta.json`

// readEvents reads an ocsf.ndjson.
func readEvents(t *testing.T, path string) []ocsf.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []ocsf.Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e ocsf.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s: %v: %s", path, err, sc.Bytes())
		}
		evs = append(evs, e)
	}
	return evs
}

// runJSON is the part of `ferry run --json` these tests read.
type runJSON struct {
	ExitCode int `json:"exit_code"`
	Events   *struct {
		State   string       `json:"state"`
		Reason  string       `json:"reason"`
		Path    string       `json:"path"`
		Summary string       `json:"summary"`
		Counts  *ocsf.Counts `json:"counts"`
	} `json:"events"`
}

// TestRunEvents is `ferry run` against the embedded gateway: the run's
// command is in DIR/ocsf.ndjson as an OCSF launch (its argv the command
// line) and an exit with its code, each with the raw upstream shorthand;
// the summary line and --json count them; events of before the run are
// left out.
func TestRunEvents(t *testing.T) {
	activeGateway(t)
	wantOK(t, runFerry(t, nil, "-q", "sandbox", "create", "box"))
	wantOK(t, runFerry(t, nil, "exec", "box", "--", "echo", "before-the-run"))
	time.Sleep(ferry.EventsSkew + 100*time.Millisecond)
	out := filepath.Join(t.TempDir(), "out")
	r := runFerry(t, nil, "--mode", "posix", "run", "box", "--out", out, "--", "sh", "-c", metaCmd+"; exit 5")
	if r.code != 5 {
		t.Fatalf("run: exit %d, stderr %q", r.code, r.stderr)
	}
	evs := readEvents(t, filepath.Join(out, "ocsf.ndjson"))
	var launch, exit *ocsf.Event
	for i, e := range evs {
		if e.Class != ocsf.ClassProcess || e.Format != ocsf.FormatShorthand || e.Process == nil {
			t.Errorf("event %+v: want a process event from its shorthand", e)
			continue
		}
		var raw string
		if err := json.Unmarshal(e.Raw, &raw); err != nil || !strings.HasPrefix(raw, "PROC:") {
			t.Errorf("event raw %s: want upstream's shorthand line", e.Raw)
		}
		if strings.Contains(e.Process.CmdLine, "before-the-run") {
			t.Errorf("event %+v is from before the run", e)
		}
		if e.Activity == "launch" && strings.Contains(e.Process.CmdLine, "exit 5") {
			launch = &evs[i]
		}
		if launch != nil && e.Activity == "terminate" && e.Process.PID == launch.Process.PID {
			exit = &evs[i]
		}
	}
	if launch == nil || exit == nil || exit.ExitCode == nil || *exit.ExitCode != 5 || launch.Process.Name != "sh" {
		t.Fatalf("no launch and exit 5 of the run's command in %d events: %+v", len(evs), evs)
	}
	// POSIX mode's uploads and pull are execs too: all are counted.
	summary := regexp.MustCompile(`ferry: events: network 0 \(0 denied\), process (\d+), findings 0 \(` + regexp.QuoteMeta(filepath.Join(out, "ocsf.ndjson")) + `\)\n`)
	m := summary.FindStringSubmatch(r.stderr)
	if m == nil || m[1] != itoa(len(evs)) {
		t.Fatalf("stderr %q: want the summary line counting %d process events", r.stderr, len(evs))
	}

	r = runFerry(t, nil, "--json", "run", "box", "--out", out, "--", "sh", "-c", metaCmd)
	wantOK(t, r)
	var res runJSON
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if ev := res.Events; ev == nil || ev.State != "observed" || ev.Counts == nil || ev.Counts.Process.Total < 2 ||
		ev.Counts.Process.Total != len(readEvents(t, ev.Path)) || !strings.HasPrefix(ev.Summary, "network 0 (0 denied), process ") {
		t.Fatalf("--json events %+v: want observed, counting the process events of %s", res.Events, out)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestRunEventsUnavailable: a gateway that fails GetSandboxLogs (and the
// WatchSandbox a run follows the log with) gives a run whose events are
// "unavailable" with the reason, in --json and on stderr, not zero
// events; a stale ocsf.ndjson is removed; the run itself succeeds.
func TestRunEventsUnavailable(t *testing.T) {
	xdg := isolate(t)
	g := gatewaytest.Start(t, gatewaytest.Options{
		Config: gateway.Config{Logger: slog.New(slog.DiscardHandler)},
	})
	storeGateway(t, xdg, "ferry-test", "https://"+g.Addr, g.CertDir, true)
	wantOK(t, runFerry(t, nil, "-q", "sandbox", "create", "box"))
	g.Refuse("/openshell.v1.OpenShell/GetSandboxLogs", "/openshell.v1.OpenShell/WatchSandbox")
	out := filepath.Join(t.TempDir(), "out")
	stale := filepath.Join(out, "ocsf.ndjson")
	writeFile(t, stale, []byte(`{"class":"process"}`+"\n"), 0o600)

	r := runFerry(t, nil, "--json", "run", "box", "--out", out, "--", "sh", "-c", metaCmd)
	if r.code != 0 {
		t.Fatalf("run: exit %d, stderr %q", r.code, r.stderr)
	}
	var res runJSON
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if ev := res.Events; ev == nil || ev.State != "unavailable" || ev.Counts != nil || ev.Path != "" ||
		!strings.Contains(ev.Reason, "refused by the test") || !strings.HasPrefix(ev.Summary, "events unavailable: ") {
		t.Fatalf("--json events %+v: want unavailable with the gateway's reason, no counts", res.Events)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale %s: %v; want it removed", stale, err)
	}

	r = runFerry(t, nil, "run", "box", "--out", out, "--", "sh", "-c", metaCmd)
	if r.code != 0 || !strings.Contains(r.stderr, "ferry: events unavailable: ") || strings.Contains(r.stderr, "events: network") {
		t.Errorf("stderr %q: want events unavailable, no counts", r.stderr)
	}
	wantFailure(t, runFerry(t, nil, "sandbox", "events", "box"), "events unavailable", "refused by the test")
}

var (
	eventTime = regexp.MustCompile(`"time":"[^"]*"`)
	eventPID  = regexp.MustCompile(`("pid":|\w\()\d+`)
)

// TestSandboxEvents is `ferry sandbox events` on the embedded gateway's
// events: the table and --json (golden, times and pids masked).
func TestSandboxEvents(t *testing.T) {
	activeGateway(t)
	wantOK(t, runFerry(t, nil, "-q", "sandbox", "create", "box"))
	if r := runFerry(t, nil, "exec", "box", "--", "sh", "-c", "exit 3"); r.code != 3 {
		t.Fatalf("exec: exit %d, stderr %q", r.code, r.stderr)
	}

	r := runFerry(t, nil, "--json", "sandbox", "events", "box")
	wantOK(t, r)
	masked := eventPID.ReplaceAllString(eventTime.ReplaceAllString(r.stdout, `"time":"TIME"`), "${1}PID")
	golden(t, "json/events.golden", masked)

	r = runFerry(t, nil, "sandbox", "events", "box")
	wantOK(t, r)
	for _, want := range []string{"process  launch", "sh(", "cmd: sh -c 'exit 3'", "terminate", "exit 3", "events: network 0 (0 denied), process 2, findings 0\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout %q lacks %q", r.stdout, want)
		}
	}
	wantFailure(t, runFerry(t, nil, "sandbox", "events", "nosuch"), "events unavailable", "nosuch")
	wantUsage(t, runFerry(t, nil, "sandbox", "events", "box", "--since", "-1m"), "--since")
}

// TestRunOneGatewayConnection: `ferry run` reads its sandbox's log and
// runs its commands through one gateway connection, which resolves the
// sandbox once, in both modes and both gateway transports; the next
// command finds the id in the cache and resolves it not at all.
func TestRunOneGatewayConnection(t *testing.T) {
	for _, tc := range []struct{ mode, transport string }{{"posix", "exec"}, {"agent", "exec"}, {"agent", "ssh"}} {
		t.Run(tc.mode+"-"+tc.transport, func(t *testing.T) {
			g := activeGateway(t)
			wantOK(t, runFerry(t, nil, "-q", "sandbox", "create", "box"))
			// The create cached the id; this run resolves it itself.
			cache, err := os.UserCacheDir()
			if err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(filepath.Join(cache, "ferry", "sandbox-ids")); err != nil {
				t.Fatal(err)
			}
			in := filepath.Join(t.TempDir(), "in.md")
			writeFile(t, in, []byte("do it\n"), 0o644)
			for i, wantGets := range []int{1, 0} {
				conns, gets := g.Conns(), g.Calls("/openshell.v1.OpenShell/GetSandbox")
				out := filepath.Join(t.TempDir(), "out")
				r := runFerry(t, nil, "-q", "--mode", tc.mode, "--transport", tc.transport, "run", "box", "--in", in+":work/in.md", "--out", out, "--follow=false", "--", "sh", "-c", metaCmd)
				if r.code != 0 {
					t.Fatalf("run %d: exit %d, stderr %q", i+1, r.code, r.stderr)
				}
				if _, err := os.Stat(filepath.Join(out, "ocsf.ndjson")); err != nil {
					t.Fatalf("run %d: no events: %v", i+1, err)
				}
				if n := g.Conns() - conns; n != 1 {
					t.Errorf("run %d: %d gateway connections, want 1", i+1, n)
				}
				if n := g.Calls("/openshell.v1.OpenShell/GetSandbox") - gets; n != wantGets {
					t.Errorf("run %d: %d GetSandbox calls, want %d", i+1, n, wantGets)
				}
			}
		})
	}
}
