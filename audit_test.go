package ferry_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
)

// The gateway client is the log source `ferry pull --audit` uses.
var _ ferry.LogSource = (*openshell.Client)(nil)

func TestFormatLogLine(t *testing.T) {
	const ts = 1764525600123 // 2025-11-30T18:00:00.123Z
	for _, tc := range []struct {
		name string
		line openshell.LogLine
		want string
	}{
		{"exec", openshell.LogLine{Time: time.UnixMilli(ts), Level: "INFO", Source: "gateway", Message: "exec", Fields: map[string]string{
			"argv": "sh -c 'exit 3'", "exit_code": "3", "end": "exit", "env_keys": "A,B", "stdin_bytes": "0",
		}}, `2025-11-30T18:00:00.123Z INFO gateway exec argv="sh -c 'exit 3'" end=exit env_keys=A,B exit_code=3 stdin_bytes=0`},
		{"message with spaces", openshell.LogLine{Time: time.UnixMilli(ts - 123), Level: "INFO", Message: "sandbox created", Fields: map[string]string{"name": "box"}},
			`2025-11-30T18:00:00Z INFO gateway sandbox created name=box`},
		{"empty parts", openshell.LogLine{Time: time.UnixMilli(ts), Fields: map[string]string{"k": ""}},
			`2025-11-30T18:00:00.123Z - gateway "" k=""`},
		{"hostile parts stay on one line", openshell.LogLine{Time: time.UnixMilli(ts), Level: "IN FO", Source: "sand\nbox", Message: "two\nlines k=v", Fields: map[string]string{
			"a b": "c\rd", "q": `say "hi"`, "eq": "a=b", "bs": `a\b`, " ": " ",
		}}, `2025-11-30T18:00:00.123Z "IN FO" "sand\nbox" "two\nlines k=v" " "=" " "a b"="c\rd" bs="a\\b" eq="a=b" q="say \"hi\""`},
		{"message with spaces at its ends", openshell.LogLine{Time: time.UnixMilli(ts), Level: "WARN", Message: " padded "},
			`2025-11-30T18:00:00.123Z WARN gateway " padded "`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ferry.FormatLogLine(tc.line); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

type fakeLogs struct {
	lines []openshell.LogLine
	err   error
}

func (f fakeLogs) SandboxLogs(context.Context, string) ([]openshell.LogLine, error) {
	return f.lines, f.err
}

func TestPullAuditFile(t *testing.T) {
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "out")
	src := fakeLogs{lines: []openshell.LogLine{
		{Time: time.UnixMilli(1000), Level: "INFO", Message: "one"},
		{Time: time.UnixMilli(2000), Level: "WARN", Message: "two"},
	}}
	res, err := ferry.PullAudit(ctx, src, "box", out)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, ferry.AuditFile)
	if res.Path != path || res.Lines != 2 {
		t.Errorf("result %+v, want %s and 2 lines", res, path)
	}
	b, err := os.ReadFile(path)
	if want := "1970-01-01T00:00:01Z INFO gateway one\n1970-01-01T00:00:02Z WARN gateway two\n"; err != nil || string(b) != want {
		t.Errorf("file %q (%v), want %q", b, err, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want 0600", fi.Mode(), err)
	}

	// A failing source leaves the previous file as it was, and no temp.
	boom := errors.New("boom")
	if _, err := ferry.PullAudit(ctx, fakeLogs{err: boom}, "box", out); !errors.Is(err, boom) || !strings.Contains(err.Error(), "box") {
		t.Errorf("PullAudit with a failing source: %v, want boom naming the sandbox", err)
	}
	if b2, _ := os.ReadFile(path); string(b2) != string(b) {
		t.Errorf("a failed audit changed the file to %q", b2)
	}
	// An empty log is an empty file, said to be empty.
	if res, err := ferry.PullAudit(ctx, fakeLogs{}, "box", out); err != nil || res.Lines != 0 {
		t.Errorf("empty log: %+v, %v", res, err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 1 {
		t.Errorf("out holds %v, want only %s", ents, ferry.AuditFile)
	}
	if _, err := ferry.PullAudit(ctx, nil, "box", out); err == nil {
		t.Error("PullAudit without a source succeeded")
	}
}

// TestPullAuditGateway runs execs through the embedded gateway and pulls
// its audit log: each exec is there with its exit code and byte counts,
// and the secret given on stdin and in the environment is not.
func TestPullAuditGateway(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	ctx := context.Background()
	const secret = "s3cr3t-audit-7d1"
	for _, cmd := range []*relay.Command{
		{Argv: []string{"sh", "-c", "cat; exit 4"}, Stdin: strings.NewReader(secret), Env: map[string]string{"TOKEN": secret}},
		{Argv: []string{"true"}},
	} {
		cmd.Sandbox = "box"
		if _, err := c.Exec(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	res, err := ferry.PullAudit(ctx, c, "box", out)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(res.Path)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	lines := strings.Split(strings.TrimSuffix(log, "\n"), "\n")
	// Each exec is its OCSF launch and exit events, then its record.
	if res.Lines != 8 || len(lines) != 8 {
		t.Fatalf("%d records, %d lines, want 8:\n%s", res.Lines, len(lines), log)
	}
	for i, want := range []string{
		` INFO gateway sandbox created name=box workspace=default`,
		` INFO gateway sandbox ready`,
		` OCSF sandbox PROC:LAUNCH [INFO] sh(`,
		` OCSF sandbox PROC:TERMINATE [INFO] sh(`,
		` INFO gateway exec argv="sh -c 'cat; exit 4'" duration_ms=`,
		` OCSF sandbox PROC:LAUNCH [INFO] true(`,
		` OCSF sandbox PROC:TERMINATE [INFO] true(`,
		` INFO gateway exec argv=true duration_ms=`,
	} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d: %s\nwant it to contain %s", i, lines[i], want)
		}
	}
	for _, want := range []string{"end=exit env_keys=FERRY_EXEC_ID,TOKEN exit_code=4 stderr_bytes=0 stdin_bytes=16 stdout_bytes=16"} {
		if !strings.Contains(lines[4], want) {
			t.Errorf("exec line %s\nwant %s", lines[4], want)
		}
	}
	if strings.Contains(log, secret) {
		t.Errorf("the audit log holds the secret:\n%s", log)
	}
	if _, err := ferry.PullAudit(ctx, c, "nosuch", out); !errors.Is(err, relay.ErrNotFound) {
		t.Errorf("audit of an unknown sandbox: %v, want relay.ErrNotFound", err)
	}
}
