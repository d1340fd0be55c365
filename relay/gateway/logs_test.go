package gateway_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
)

const (
	stdinSecret = "stdin-secret-5f0c1d"
	envSecret   = "env-secret-9a7e42"
)

// logsFixture is a gateway with sandbox "box" on which four execs ran:
// one whose stdin and environment carry secrets (exit 3), one that timed
// out (which the client follows with the exec that stops what it left),
// and two plain ones, the second in a workdir.
type logsFixture struct {
	g   *gatewaytest.Gateway
	c   *openshell.Client
	raw openshellv1.OpenShellClient
	id  string
}

func newLogsFixture(t *testing.T) *logsFixture {
	t.Helper()
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	for _, cmd := range []*relay.Command{
		{Argv: []string{"sh", "-c", "cat >/dev/null; echo out; echo err >&2; exit 3"}, Env: map[string]string{"TOKEN": envSecret, "A_KEY": "x"}, Stdin: strings.NewReader(stdinSecret)},
		{Argv: []string{"sleep", "30"}, Timeout: time.Second},
		{Argv: []string{"mkdir", "-p", "sub dir"}},
		{Argv: []string{"printf", "%s", "two words"}, Workdir: "sub dir"},
	} {
		cmd.Sandbox = "box"
		if _, err := c.Exec(ctx, cmd); err != nil {
			t.Fatalf("exec %q: %v", cmd.Argv, err)
		}
	}
	sb, err := c.Get(ctx, "box")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := rawClient(t, g)
	return &logsFixture{g: g, c: c, raw: raw, id: sb.ID}
}

func (f *logsFixture) logs(t *testing.T, req *openshellv1.GetSandboxLogsRequest) (*openshellv1.GetSandboxLogsResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	return f.raw.GetSandboxLogs(ctx, req)
}

// pidRE is a process's pid in an OCSF shorthand: name(pid).
var pidRE = regexp.MustCompile(`\(\d+\)`)

// markRE is the mark (relay.MarkVar) of an exec ferry's client stops.
var markRE = regexp.MustCompile(`\b[0-9a-f]{32}\b`)

// messages joins the records' messages, the pids and marks in OCSF ones
// masked.
func messages(lines []*openshellv1.SandboxLogLine) string {
	var m []string
	for _, l := range lines {
		msg := l.GetMessage()
		if l.GetLevel() == "OCSF" {
			msg = pidRE.ReplaceAllString(msg, "(PID)")
			msg = markRE.ReplaceAllString(msg, "MARK")
		}
		m = append(m, msg)
	}
	return strings.Join(m, ",")
}

// fromGateway keeps the gateway's own records, not the OCSF events.
func fromGateway(lines []*openshellv1.SandboxLogLine) []*openshellv1.SandboxLogLine {
	var out []*openshellv1.SandboxLogLine
	for _, l := range lines {
		if l.GetSource() == "gateway" {
			out = append(out, l)
		}
	}
	return out
}

// TestGetSandboxLogsRequest goes over the request's fields and the codes.
func TestGetSandboxLogsRequest(t *testing.T) {
	f := newLogsFixture(t)
	// Each exec is its OCSF launch and exit (source sandbox), then the
	// gateway's exec record.
	e1 := "PROC:LAUNCH [INFO] sh(PID) [cmd:sh -c 'cat >/dev/null; echo out; echo err >&2; exit 3'],PROC:TERMINATE [INFO] sh(PID) [exit:3]"
	e2 := "PROC:LAUNCH [INFO] sleep(PID) [cmd:sleep 30],PROC:TERMINATE [CRIT] sleep(PID) [exit:124]"
	// The client's stop of what the timed-out exec left running.
	stop := "PROC:LAUNCH [INFO] sh(PID) [cmd:sh -c '" + relay.StopScript + "' sh MARK],PROC:TERMINATE [INFO] sh(PID) [exit:0]"
	e3 := "PROC:LAUNCH [INFO] mkdir(PID) [cmd:mkdir -p 'sub dir'],PROC:TERMINATE [INFO] mkdir(PID) [exit:0]"
	e4 := "PROC:LAUNCH [INFO] printf(PID) [cmd:printf '%s' 'two words'],PROC:TERMINATE [INFO] printf(PID) [exit:0]"
	all := "sandbox created,sandbox ready," + e1 + ",exec," + e2 + ",exec," + stop + ",exec," + e3 + ",exec," + e4 + ",exec"
	gw := "sandbox created,sandbox ready,exec,exec,exec,exec,exec"
	sb := e1 + "," + e2 + "," + stop + "," + e3 + "," + e4
	future := time.Now().Add(time.Hour).UnixMilli()
	for _, tc := range []struct {
		name  string
		req   *openshellv1.GetSandboxLogsRequest
		code  codes.Code
		want  string // messages, in order
		total uint32
	}{
		{"defaults", &openshellv1.GetSandboxLogsRequest{SandboxId: f.id}, codes.OK, all, 17},
		{"lines", &openshellv1.GetSandboxLogsRequest{SandboxId: f.id, Lines: 2}, codes.OK, "PROC:TERMINATE [INFO] printf(PID) [exit:0],exec", 2},
		{"lines beyond the buffer", &openshellv1.GetSandboxLogsRequest{SandboxId: f.id, Lines: 100000}, codes.OK, all, 17},
		{"since past", &openshellv1.GetSandboxLogsRequest{SandboxId: f.id, SinceMs: 1}, codes.OK, all, 17},
		{"since future", &openshellv1.GetSandboxLogsRequest{SandboxId: f.id, SinceMs: future}, codes.OK, "", 17},
		{"source gateway", &openshellv1.GetSandboxLogsRequest{SandboxId: f.id, Sources: []string{"gateway"}}, codes.OK, gw, 17},
		{"source sandbox", &openshellv1.GetSandboxLogsRequest{SandboxId: f.id, Sources: []string{"sandbox"}}, codes.OK, sb, 17},
		{"sources either", &openshellv1.GetSandboxLogsRequest{SandboxId: f.id, Sources: []string{"sandbox", "gateway"}}, codes.OK, all, 17},
		{"min level info", &openshellv1.GetSandboxLogsRequest{SandboxId: f.id, MinLevel: "info"}, codes.OK, all, 17},
		{"min level warn", &openshellv1.GetSandboxLogsRequest{SandboxId: f.id, MinLevel: "WARN"}, codes.OK, "exec", 17},
		{"min level error", &openshellv1.GetSandboxLogsRequest{SandboxId: f.id, MinLevel: "ERROR"}, codes.OK, "", 17},
		{"min level trace", &openshellv1.GetSandboxLogsRequest{SandboxId: f.id, MinLevel: "TRACE"}, codes.OK, all, 17},
		{"filters after lines", &openshellv1.GetSandboxLogsRequest{SandboxId: f.id, Lines: 10, MinLevel: "WARN"}, codes.OK, "exec", 10},
		{"workspace", &openshellv1.GetSandboxLogsRequest{SandboxId: f.id, Workspace: "default"}, codes.OK, all, 17},
		// Upstream does not look at the workspace: the id names the sandbox.
		{"other workspace", &openshellv1.GetSandboxLogsRequest{SandboxId: f.id, Workspace: "other"}, codes.OK, all, 17},
		{"unknown id", &openshellv1.GetSandboxLogsRequest{SandboxId: "00000000-0000-4000-8000-000000000000"}, codes.NotFound, "", 0},
		{"no id", &openshellv1.GetSandboxLogsRequest{}, codes.InvalidArgument, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := f.logs(t, tc.req)
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
			if err != nil {
				return
			}
			if got := messages(resp.GetLogs()); got != tc.want || resp.GetBufferTotal() != tc.total {
				t.Errorf("got %q, buffer_total %d; want %q, %d", got, resp.GetBufferTotal(), tc.want, tc.total)
			}
		})
	}
}

// TestGetSandboxLogsRecords checks what each record says: the exec's argv,
// workdir, environment keys, how it ended, its exit code and byte counts,
// and that neither stdin nor an environment value appears anywhere.
func TestGetSandboxLogsRecords(t *testing.T) {
	f := newLogsFixture(t)
	resp, err := f.logs(t, &openshellv1.GetSandboxLogsRequest{SandboxId: f.id})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := protojson.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{stdinSecret, envSecret} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("GetSandboxLogs carries %q: %s", secret, raw)
		}
	}
	logs := fromGateway(resp.GetLogs())
	if len(logs) != 7 {
		t.Fatalf("%d records, want 7: %s", len(logs), raw)
	}
	start := time.Now().Add(-time.Minute).UnixMilli()
	for _, l := range logs {
		if l.GetSandboxId() != f.id || l.GetSource() != "gateway" || l.GetTimestampMs() < start || l.GetTarget() == "" {
			t.Errorf("record %v: want sandbox_id %s, source gateway, a recent timestamp and a target", l, f.id)
		}
	}
	if got := logs[0].GetFields(); got["name"] != "box" || got["workspace"] != "default" {
		t.Errorf("created record fields %v", got)
	}
	for i, want := range []map[string]string{
		// Each command carries the client's mark (relay.MarkVar) in its
		// environment, the stop (the third) in its arguments.
		{"argv": `sh -c 'cat >/dev/null; echo out; echo err >&2; exit 3'`, "env_keys": "A_KEY,FERRY_EXEC_ID,TOKEN", "end": "exit", "exit_code": "3",
			"stdin_bytes": strconv.Itoa(len(stdinSecret)), "stdout_bytes": "4", "stderr_bytes": "4"},
		{"argv": "sleep 30", "env_keys": "FERRY_EXEC_ID", "end": "timeout", "exit_code": "124", "timeout_seconds": "1", "stdin_bytes": "0", "stdout_bytes": "0", "stderr_bytes": "0"},
		{"end": "exit", "exit_code": "0"},
		{"argv": "mkdir -p 'sub dir'", "env_keys": "FERRY_EXEC_ID", "end": "exit", "exit_code": "0"},
		{"argv": "printf '%s' 'two words'", "env_keys": "FERRY_EXEC_ID", "workdir": "sub dir", "end": "exit", "exit_code": "0", "stdout_bytes": "9"},
	} {
		l := logs[2+i]
		got := l.GetFields()
		if _, ok := want["argv"]; !ok && !strings.HasPrefix(got["argv"], "sh -c '"+relay.StopScript+"' sh ") {
			t.Errorf("exec %d: argv %q, want the stop script", i, got["argv"])
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("exec %d: %s=%q, want %q (all: %v)", i, k, got[k], v, got)
			}
		}
		if _, err := strconv.ParseInt(got["duration_ms"], 10, 64); err != nil {
			t.Errorf("exec %d: duration_ms %q", i, got["duration_ms"])
		}
		for _, k := range []string{"env_keys", "workdir", "timeout_seconds"} {
			if _, ok := want[k]; !ok && got[k] != "" {
				t.Errorf("exec %d: %s=%q, want none", i, k, got[k])
			}
		}
		if wantLevel := map[string]string{"exit": "INFO", "timeout": "WARN"}[got["end"]]; l.GetLevel() != wantLevel {
			t.Errorf("exec %d: level %q, want %q", i, l.GetLevel(), wantLevel)
		}
	}
	if d, _ := strconv.Atoi(logs[3].GetFields()["duration_ms"]); d < 1000 {
		t.Errorf("timed-out exec lasted %dms, want at least its 1s timeout", d)
	}

	// The client's method returns the same records by name.
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	lines, err := f.c.SandboxLogs(ctx, "box")
	var got []string
	for _, l := range lines {
		if l.Source == "gateway" {
			got = append(got, l.Message)
		}
	}
	if err != nil || strings.Join(got, ",") != messages(logs) {
		t.Errorf("SandboxLogs: %q, %v; want %q", got, err, messages(logs))
	}
	if len(lines) > 0 && (lines[0].Time.UnixMilli() != logs[0].GetTimestampMs() || lines[0].Level != logs[0].GetLevel() || lines[0].Source != logs[0].GetSource()) {
		t.Errorf("SandboxLogs' first record %+v, want %v", lines[0], logs[0])
	}
	if _, err := f.c.SandboxLogs(ctx, "nosuch"); !errors.Is(err, relay.ErrNotFound) {
		t.Errorf("SandboxLogs of an unknown sandbox: %v, want relay.ErrNotFound", err)
	}
}

// TestSandboxLogsRestart: a gateway started on the same root answers with
// the records of the one before; deleting the sandbox removes them.
func TestSandboxLogsRestart(t *testing.T) {
	f := newLogsFixture(t)
	before, err := f.logs(t, &openshellv1.GetSandboxLogsRequest{SandboxId: f.id})
	if err != nil {
		t.Fatal(err)
	}
	again, err := gateway.New(gateway.Config{Root: f.g.Root})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	ctx := context.Background()
	after, err := again.GetSandboxLogs(ctx, &openshellv1.GetSandboxLogsRequest{SandboxId: f.id})
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := protojson.Marshal(before)
	b2, _ := protojson.Marshal(after)
	if string(b1) != string(b2) {
		t.Errorf("after a restart:\n%s\nbefore:\n%s", b2, b1)
	}
	files, _ := filepath.Glob(filepath.Join(f.g.Root, ".gateway", "logs", "*"))
	if len(files) != 1 {
		t.Fatalf("log files %v, want one", files)
	}
	if fi, err := os.Stat(files[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("log file mode %v (%v), want 0600", fi.Mode(), err)
	}
	b, _ := os.ReadFile(files[0])
	for _, secret := range []string{stdinSecret, envSecret} {
		if strings.Contains(string(b), secret) {
			t.Errorf("the log file holds %q", secret)
		}
	}

	if err := f.c.Delete(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.logs(t, &openshellv1.GetSandboxLogsRequest{SandboxId: f.id}); status.Code(err) != codes.NotFound {
		t.Errorf("logs of a deleted sandbox: %v, want NOT_FOUND", err)
	}
	if _, err := os.Stat(files[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("log file of a deleted sandbox: %v, want it removed", err)
	}
}

// TestWatchSandboxFollowLogs: WatchSandbox with follow_logs sends the
// sandbox, the log's tail, new records as they come, and ends CANCELLED
// after the sandbox's deletion.
func TestWatchSandboxFollowLogs(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	sb, err := c.Get(ctx, "box")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := rawClient(t, g)
	w, err := raw.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Id: sb.ID, FollowLogs: true, LogTailLines: 1})
	if err != nil {
		t.Fatal(err)
	}
	next := func() *openshellv1.SandboxStreamEvent {
		t.Helper()
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("WatchSandbox: %v", err)
		}
		return ev
	}
	if ev := next(); ev.GetSandbox().GetStatus().GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
		t.Fatalf("first event %v, want the READY sandbox", ev)
	}
	if ev := next(); ev.GetLog().GetMessage() != "sandbox ready" {
		t.Fatalf("second event %v, want the tail of one record: sandbox ready", ev)
	}
	if _, err := c.Exec(ctx, &relay.Command{Sandbox: "box", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PROC:LAUNCH [INFO] true(PID) [cmd:true]", "PROC:TERMINATE [INFO] true(PID) [exit:0]"} {
		if ev := next(); pidRE.ReplaceAllString(ev.GetLog().GetMessage(), "(PID)") != want || ev.GetLog().GetTarget() != "ocsf" {
			t.Fatalf("event %v, want the OCSF event %s", ev, want)
		}
	}
	if ev := next(); ev.GetLog().GetMessage() != "exec" || ev.GetLog().GetFields()["argv"] != "true" {
		t.Fatalf("event %v, want the exec's record", ev)
	}
	if err := c.Delete(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.GetLog().GetMessage() != "sandbox deleting" {
		t.Fatalf("event %v, want sandbox deleting", ev)
	}
	// Upstream's log bus closes under the stream: CANCELLED.
	if ev, err := w.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("after the deletion: %v, %v; want CANCELLED", ev, err)
	}
}
