package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry"
)

var (
	auditTime     = regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z `)
	auditDuration = regexp.MustCompile(`duration_ms=\d+`)
	// auditMark is the client's mark (relay.MarkVar) in its stop's argv.
	auditMark = regexp.MustCompile(`\b[0-9a-f]{32}\b`)
)

// TestPullAuditGolden drives the real path: an embedded gateway, `ferry
// exec` of a few commands (one given a secret on stdin and in --env), then
// `ferry pull SANDBOX --audit`: openshell-audit.log lists each exec with
// its exit code and byte counts, and never the secret. The records of
// those execs, with times and durations masked, are a golden file.
func TestPullAuditGolden(t *testing.T) {
	g := activeGateway(t)
	wantOK(t, runFerry(t, nil, "sandbox", "create", "box", "-q"))
	writeFile(t, filepath.Join(g.Root, "box", "rascal-meta", "meta.json"), []byte(`{"exit_code":0}`), 0o644)
	const secret = "cli-secret-31c9"
	if r := runFerry(t, nil, "exec", "box", "--", "sh", "-c", "echo hi; echo oops >&2; exit 3"); r.code != 3 {
		t.Fatalf("exec: exit %d, stderr %q", r.code, r.stderr)
	}
	wantOK(t, runFerry(t, strings.NewReader(secret), "exec", "box", "--env", "TOKEN="+secret, "--workdir", "rascal-meta", "--", "sh", "-c", "cat > token"))
	if r := runFerry(t, nil, "exec", "box", "--timeout", "1s", "--", "sleep", "30"); r.code != 124 {
		t.Fatalf("exec --timeout: exit %d, stderr %q", r.code, r.stderr)
	}
	out := filepath.Join(t.TempDir(), "out")

	r := runFerry(t, nil, "--json", "--mode", "posix", "pull", "box", "--audit", "--out", out)
	if r.code != 0 {
		t.Fatalf("pull --audit: exit %d, stderr %q", r.code, r.stderr)
	}
	var res struct {
		Saved      []string
		Audit      string
		AuditLines int `json:"audit_lines"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("pull --json: %v: %q", err, r.stdout)
	}
	path := filepath.Join(out, ferry.AuditFile)
	if res.Audit != path || len(res.Saved) != 1 {
		t.Errorf("pull --json: %s; want audit %q and meta.json saved", r.stdout, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	if n := strings.Count(log, "\n"); n != res.AuditLines || n < 7 {
		t.Errorf("audit_lines %d, file has %d lines:\n%s", res.AuditLines, n, log)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v (%v), want 0600", path, fi.Mode(), err)
	}
	if strings.Contains(log, secret) {
		t.Fatalf("the audit log holds the secret:\n%s", log)
	}
	for _, want := range []string{
		`exec argv="sh -c 'echo hi; echo oops >&2; exit 3'" duration_ms=`,
		// Each command carries the client's mark (relay.MarkVar).
		`end=exit env_keys=FERRY_EXEC_ID exit_code=3 stderr_bytes=5 stdin_bytes=0 stdout_bytes=3`,
		`end=exit env_keys=FERRY_EXEC_ID,TOKEN exit_code=0 stderr_bytes=0 stdin_bytes=15 stdout_bytes=0 workdir=rascal-meta`,
		`WARN gateway exec argv="sleep 30" duration_ms=`,
		`end=timeout env_keys=FERRY_EXEC_ID exit_code=124 stderr_bytes=0 stdin_bytes=0 stdout_bytes=0 timeout_seconds=1`,
		// The client's stop of what the timed-out exec left running.
		`INFO gateway exec argv="sh -c '_ferry_m=`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the audit log lacks %s:\n%s", want, log)
		}
	}
	// The records after the execs above are the pull's own: their argv
	// is the POSIX mode's scripts, whose text is transfer's business.
	// The OCSF process events between them are ocsf's business (see
	// TestRunEvents); the golden is the gateway's own records.
	var lines []string
	for _, l := range strings.SplitAfter(log, "\n") {
		// (Quoted when the command line holds quotes.)
		if !strings.Contains(l, " OCSF sandbox PROC:") && !strings.Contains(l, ` OCSF sandbox "PROC:`) {
			lines = append(lines, l)
		}
	}
	if len(lines) < 8 || !strings.Contains(lines[6], "rascal-meta meta.json agent.ndjson") {
		t.Fatalf("want the pull's own execs after the six records above:\n%s", log)
	}
	masked := auditTime.ReplaceAllString(strings.Join(lines[:6], ""), "TIME ")
	masked = auditDuration.ReplaceAllString(masked, "duration_ms=D")
	masked = auditMark.ReplaceAllString(masked, "MARK")
	golden(t, "audit/pull.golden", masked)

	// Human output names the file; --audit needs a gateway.
	r = runFerry(t, nil, "--mode", "posix", "pull", "box", "--audit", "--out", out)
	if r.code != 0 || !strings.Contains(r.stderr, "audit log: "+path) {
		t.Errorf("pull --audit: exit %d, stderr %q; want it to name %s", r.code, r.stderr, path)
	}
	wantUsage(t, runFerry(t, nil, "--ssh", "me@127.0.0.1", "pull", "box", "--audit"), "--audit")
	wantFailure(t, runFerry(t, nil, "pull", "nosuch", "--audit", "--out", out), "nosuch", "not found")
}
