package gateway_test

import (
	"strings"
	"testing"
	"time"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/openshell/ocsf"
)

// TestOCSFProcessEvents: each exec is an OCSF launch and exit event,
// carried as upstream's LogPushLayer carries them (level OCSF, target
// ocsf, source sandbox, no fields) and readable by package ocsf: the
// process's name, one pid for both, the argv as its command line, the
// exit code, [CRIT] for a timeout; never stdin or an environment value.
func TestOCSFProcessEvents(t *testing.T) {
	f := newLogsFixture(t)
	resp, err := f.logs(t, &openshellv1.GetSandboxLogsRequest{SandboxId: f.id, Sources: []string{"sandbox"}})
	if err != nil {
		t.Fatal(err)
	}
	var evs []ocsf.Event
	for _, l := range resp.GetLogs() {
		if l.GetLevel() != "OCSF" || l.GetTarget() != "ocsf" || l.GetSource() != "sandbox" || len(l.GetFields()) != 0 || l.GetSandboxId() != f.id {
			t.Errorf("record %v: want level OCSF, target ocsf, source sandbox, no fields", l)
		}
		for _, secret := range []string{stdinSecret, envSecret} {
			if strings.Contains(l.GetMessage(), secret) {
				t.Errorf("event %q carries %q", l.GetMessage(), secret)
			}
		}
		e, err := ocsf.Parse(ocsf.Line{Time: time.UnixMilli(l.GetTimestampMs()), Level: l.GetLevel(), Target: l.GetTarget(), Source: l.GetSource(), Message: l.GetMessage()})
		if err != nil {
			t.Fatalf("parse %q: %v", l.GetMessage(), err)
		}
		evs = append(evs, e)
	}
	want := []struct {
		name, cmd string
		severity  string
		exit      int
	}{
		{"sh", `sh -c 'cat >/dev/null; echo out; echo err >&2; exit 3'`, "informational", 3},
		{"sleep", "sleep 30", "critical", 124},
		{"sh", "", "informational", 0}, // the client's stop after the timeout
		{"mkdir", "mkdir -p 'sub dir'", "informational", 0},
		{"printf", "printf '%s' 'two words'", "informational", 0},
	}
	if len(evs) != 2*len(want) {
		t.Fatalf("%d events, want %d", len(evs), 2*len(want))
	}
	for i, w := range want {
		launch, exit := evs[2*i], evs[2*i+1]
		if w.cmd == "" && launch.Process != nil {
			// The stop's arguments end in its random mark.
			w.cmd = launch.Process.CmdLine
			if !strings.HasPrefix(w.cmd, "sh -c '"+relay.StopScript+"' sh ") {
				t.Errorf("exec %d: cmd %q, want the stop script", i, w.cmd)
			}
		}
		if launch.Class != ocsf.ClassProcess || launch.Activity != "launch" || launch.Process == nil ||
			launch.Process.Name != w.name || launch.Process.PID <= 0 || launch.Process.CmdLine != w.cmd || launch.Severity != "informational" {
			t.Errorf("exec %d launch %+v %+v; want %s with cmd %q", i, launch, launch.Process, w.name, w.cmd)
		}
		if exit.Class != ocsf.ClassProcess || exit.Activity != "terminate" || exit.Process == nil || launch.Process == nil ||
			exit.Process.PID != launch.Process.PID || exit.ExitCode == nil || *exit.ExitCode != w.exit || exit.Severity != w.severity {
			t.Errorf("exec %d exit %+v; want pid of the launch, exit %d, severity %s", i, exit, w.exit, w.severity)
		}
	}
}
