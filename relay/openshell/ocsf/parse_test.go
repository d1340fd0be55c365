package ocsf

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fixtures reads testdata/name: NAME<TAB>MESSAGE lines, # comments.
func fixtures(t testing.TB, name string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("%s: line %q has no tab", name, line)
		}
		out[k] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func intp(i int) *int { return &i }

var pushed = time.UnixMilli(1775014132118).UTC()

func TestParseFixtures(t *testing.T) {
	all := fixtures(t, "shorthand.txt")
	for k, v := range fixtures(t, "json.txt") {
		all[k] = v
	}
	for _, tc := range []struct {
		name string
		want Event
	}{
		{"net_allow", Event{Class: ClassNetwork, ClassUID: 4001, Activity: "open", Decision: Allowed, Severity: "informational",
			Process: &Process{Name: "python3", PID: 42}, Dest: &Endpoint{Host: "api.example.com", Port: 443}, Policy: "default-egress", Engine: "mechanistic"}},
		{"net_bypass", Event{Class: ClassNetwork, ClassUID: 4001, Activity: "refuse", Decision: Denied, Severity: "medium",
			Process: &Process{Name: "node", PID: 1234}, Dest: &Endpoint{Host: "93.184.216.34", Port: 443, Protocol: "tcp"}, Policy: "bypass-detect", Engine: "nftables"}},
		{"net_msg_only", Event{Class: ClassNetwork, ClassUID: 4001, Activity: "open", Severity: "informational", Message: "relay open (channel_id=ch-42)"}},
		{"net_denied_reason", Event{Class: ClassNetwork, ClassUID: 4001, Activity: "open", Decision: Denied, Severity: "medium",
			Process: &Process{Name: "/usr/bin/curl", PID: 64}, Dest: &Endpoint{Host: "httpbin.org", Port: 443}, Policy: "-", Engine: "opa", Reason: "no matching policy"}},
		{"net_ssrf", Event{Class: ClassNetwork, ClassUID: 4001, Activity: "open", Decision: Denied, Severity: "medium",
			Process: &Process{Name: "/usr/bin/curl", PID: 1618}, Dest: &Endpoint{Host: "169.254.169.254", Port: 80}, Policy: "-", Engine: "ssrf", Reason: "resolves to always-blocked address"}},
		{"net_listen", Event{Class: ClassNetwork, ClassUID: 4001, Activity: "listen", Severity: "informational", Dest: &Endpoint{Host: "10.200.0.1", Port: 3128}}},
		{"http_allow", Event{Class: ClassNetwork, ClassUID: 4002, Activity: "get", Decision: Allowed, Severity: "informational",
			Process: &Process{Name: "curl", PID: 88}, Dest: &Endpoint{Host: "api.example.com", Port: 443, Protocol: "https"}, URL: "https://api.example.com/v1/data", Policy: "default-egress", Engine: "mechanistic"}},
		{"http_port", Event{Class: ClassNetwork, ClassUID: 4002, Activity: "get", Decision: Allowed, Severity: "informational",
			Process: &Process{Name: "curl", PID: 68}, Dest: &Endpoint{Host: "172.20.0.1", Port: 9876, Protocol: "http"}, URL: "http://172.20.0.1:9876/test", Policy: "allow_host_9876", Engine: "mechanistic"}},
		{"http_unmapped", Event{Class: ClassNetwork, ClassUID: 4002, Activity: "post", Decision: Allowed, Severity: "informational",
			Dest: &Endpoint{Host: "httpbin.org", Port: 443, Protocol: "http"}, URL: "http://httpbin.org:443/anything", Policy: "httpbin", Engine: "extension"}},
		{"http_denied", Event{Class: ClassNetwork, ClassUID: 4002, Activity: "put", Decision: Denied, Severity: "medium",
			Process: &Process{Name: "curl", PID: 1618}, Dest: &Endpoint{Host: "169.254.169.254", Port: 80, Protocol: "http"}, URL: "http://169.254.169.254/latest/api/token", Policy: "aws_iam", Engine: "ssrf", Reason: "not in allowed_ips"}},
		{"proc_launch", Event{Class: ClassProcess, ClassUID: 1007, Activity: "launch", Severity: "informational", Process: &Process{Name: "python3", PID: 42, CmdLine: "python3 /app/main.py"}}},
		{"proc_exit", Event{Class: ClassProcess, ClassUID: 1007, Activity: "terminate", Severity: "informational", Process: &Process{Name: "python3", PID: 42}, ExitCode: intp(0)}},
		{"proc_launch_bare", Event{Class: ClassProcess, ClassUID: 1007, Activity: "launch", Severity: "informational", Process: &Process{Name: "sleep", PID: 49}}},
		{"proc_timeout", Event{Class: ClassProcess, ClassUID: 1007, Activity: "terminate", Severity: "critical", Process: &Process{Name: "unknown", PID: 0}}},
		{"finding_blocked", Event{Class: ClassFinding, ClassUID: 2004, Activity: "blocked", Decision: Denied, Severity: "high", Finding: "NSSH1 Nonce Replay Attack", FindingType: "nssh1-replay-abc"}},
		{"finding_create", Event{Class: ClassFinding, ClassUID: 2004, Activity: "create", Severity: "informational", Finding: "configured content matched", FindingType: "content_guard.match"}},
		{"ssh_open", Event{Class: ClassOther, ClassUID: 4007, Activity: "open", Decision: Allowed, Severity: "informational", Message: "ALLOWED 10.42.0.1:48201 [auth:NSSH1]"}},
		{"lifecycle", Event{Class: ClassOther, ClassUID: 6002, Activity: "start", Severity: "informational", Message: "openshell-sandbox success"}},
		{"config", Event{Class: ClassOther, ClassUID: 5019, Activity: "loaded", Severity: "informational", Message: "policy reloaded [version:v3 hash:sha256:abc123def456]"}},
		{"base", Event{Class: ClassOther, ClassUID: 0, Severity: "informational", Message: "Network namespace created [ns:openshell-sandbox-abc123]"}},
		{"api", Event{Class: ClassOther, ClassUID: 6003, Activity: "inference", Severity: "informational", Message: "Success gpt-4o via openai 812ms [chat.completions]"}},

		{"json_net_allow", Event{Class: ClassNetwork, ClassUID: 4001, ClassName: "Network Activity", Activity: "open", Decision: Allowed, Severity: "informational",
			Time: time.UnixMilli(1775014138811).UTC(), Process: &Process{Name: "/usr/bin/curl", PID: 57}, Dest: &Endpoint{Host: "api.github.com", Port: 443},
			Policy: "github_api", Engine: "opa", Message: "CONNECT allowed api.github.com:443"}},
		{"json_net_denied", Event{Class: ClassNetwork, ClassUID: 4001, ClassName: "Network Activity", Activity: "open", Decision: Denied, Severity: "medium",
			Time: time.UnixMilli(1775014140000).UTC(), Process: &Process{Name: "/usr/bin/curl", PID: 63}, Dest: &Endpoint{Host: "httpbin.org", Port: 443},
			Policy: "-", Engine: "opa", Reason: "no matching policy", Message: "CONNECT denied httpbin.org:443"}},
		{"json_proc_launch", Event{Class: ClassProcess, ClassUID: 1007, ClassName: "Process Activity", Activity: "launch", Decision: Allowed, Severity: "informational",
			Time: time.UnixMilli(1742054400000).UTC(), Process: &Process{Name: "python3", PID: 42, CmdLine: "python3 /app/main.py"}, Message: "Process started: python3 /app/main.py"}},
		{"json_finding", Event{Class: ClassFinding, ClassUID: 2004, ClassName: "Detection Finding", Activity: "blocked", Decision: Denied, Severity: "high",
			Time: time.UnixMilli(1742054400000).UTC(), Finding: "NSSH1 Nonce Replay Attack", FindingType: "nssh1-replay-abc"}},
		{"json_http", Event{Class: ClassNetwork, ClassUID: 4002, ClassName: "HTTP Activity", Activity: "get", Decision: Allowed, Severity: "informational",
			Time: time.UnixMilli(1742054400000).UTC(), Process: &Process{Name: "curl", PID: 68}, Dest: &Endpoint{Host: "172.20.0.1", Port: 9876, Protocol: "http"},
			URL: "http://172.20.0.1:9876/test", Policy: "allow_host_9876", Engine: "mechanistic"}},
		{"json_base", Event{Class: ClassOther, ClassUID: 0, ClassName: "Base Event", Activity: "other", Severity: "informational",
			Time: time.UnixMilli(1742054400000).UTC(), Message: "Test event"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, ok := all[tc.name]
			if !ok {
				t.Fatalf("no fixture %s", tc.name)
			}
			got, err := Parse(Line{Time: pushed, Level: "OCSF", Target: "ocsf", Source: "sandbox", Message: msg})
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if strings.HasPrefix(tc.name, "json_") {
				want.Format = FormatJSON
				if !json.Valid(got.Raw) || !strings.Contains(string(got.Raw), `"class_uid":`) {
					t.Errorf("raw %s is not the JSON event", got.Raw)
				}
			} else {
				want.Format = FormatShorthand
				want.ClassName = prefixName[want.ClassUID]
				want.Time = pushed
				var raw string
				if err := json.Unmarshal(got.Raw, &raw); err != nil || raw != msg {
					t.Errorf("raw %s, want the line %q (%v)", got.Raw, msg, err)
				}
			}
			got.Raw = nil
			if !reflect.DeepEqual(got, want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(want)
				t.Errorf("got  %s\nwant %s", g, w)
			}
		})
	}
}

// TestParseHostile: lines a sandbox or gateway could send that are no
// event upstream writes are skipped with the sentinel, never a crash and
// never a guessed event; lines that are no OCSF event at all are not
// counted as skipped.
func TestParseHostile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		level string
		msg   string
		want  error
	}{
		{"oversized", "OCSF", "NET:OPEN [INFO] ALLOWED " + strings.Repeat("a", MaxLineBytes), ErrTooLarge},
		{"oversized json", "OCSF", `{"class_uid":4001,"message":"` + strings.Repeat("a", MaxLineBytes) + `"}`, ErrTooLarge},
		{"malformed json", "OCSF", `{"class_uid":4001,`, ErrMalformed},
		{"json trailing", "OCSF", `{"class_uid":4001} {"class_uid":1007}`, ErrMalformed},
		{"json no class", "OCSF", `{"message":"x"}`, ErrMalformed},
		{"json class string", "OCSF", `{"class_uid":"4001"}`, ErrMalformed},
		{"json class huge", "OCSF", `{"class_uid":99999999999}`, ErrMalformed},
		{"json pid string", "OCSF", `{"class_uid":1007,"process":{"name":"x","pid":"42"}}`, ErrMalformed},
		{"json port too big", "OCSF", `{"class_uid":4001,"dst_endpoint":{"domain":"x","port":1e400}}`, ErrMalformed},
		{"json exit float", "OCSF", `{"class_uid":1007,"exit_code":1.5}`, ErrMalformed},
		{"json deep", "OCSF", `{"class_uid":0,"unmapped":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`, ErrMalformed},
		{"unknown class", "OCSF", "BOGUS:OPEN [INFO] x", ErrMalformed},
		{"no severity", "OCSF", "NET:OPEN ALLOWED x(1) -> y:1", ErrMalformed},
		{"empty", "OCSF", "", ErrMalformed},
		{"proc no pid", "OCSF", "PROC:LAUNCH [INFO] python3", ErrMalformed},
		{"proc bad exit", "OCSF", "PROC:TERMINATE [INFO] sh(1) [exit:zero]", ErrMalformed},
		{"proc huge pid", "OCSF", "PROC:LAUNCH [INFO] sh(99999999999999999999)", ErrMalformed},
		{"finding unquoted", "OCSF", "FINDING:BLOCKED [HIGH] title", ErrMalformed},
		{"finding unterminated", "OCSF", `FINDING:BLOCKED [HIGH] "title`, ErrMalformed},
		{"finding bad escape", "OCSF", `FINDING:BLOCKED [HIGH] "a\u{zz}" [type:x]`, ErrMalformed},
		{"not utf8", "OCSF", "NET:OPEN [INFO] \xff\xfe", ErrMalformed},
		{"plain tracing", "INFO", "Starting sandbox", ErrNotEvent},
		{"gateway record", "WARN", "exec", ErrNotEvent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(Line{Level: tc.level, Message: tc.msg})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Parse: %v; want %v", err, tc.want)
			}
		})
	}
}

// TestCollect: a log of events, plain lines and hostile lines gives the
// events in order, counts them by class and decision, and counts the
// hostile ones as skipped.
func TestCollect(t *testing.T) {
	sh := fixtures(t, "shorthand.txt")
	lines := []Line{
		{Level: "INFO", Target: "openshell_sandbox", Message: "Starting sandbox"},
		{Level: "OCSF", Target: "ocsf", Message: sh["net_allow"]},
		{Level: "OCSF", Target: "ocsf", Message: sh["net_denied_reason"]},
		{Level: "OCSF", Target: "ocsf", Message: sh["http_denied"]},
		{Level: "OCSF", Target: "ocsf", Message: sh["proc_launch"]},
		{Level: "OCSF", Target: "ocsf", Message: sh["proc_exit"]},
		{Level: "OCSF", Target: "ocsf", Message: sh["finding_blocked"]},
		{Level: "OCSF", Target: "ocsf", Message: sh["config"]},
		{Level: "OCSF", Target: "ocsf", Message: `{"class_uid":"x"}`},
		{Level: "OCSF", Target: "ocsf", Message: strings.Repeat("x", MaxLineBytes+1)},
		{Level: "OCSF", Target: "ocsf", Message: "NOPE [INFO]"},
	}
	s := Collect(lines)
	want := Counts{
		Network: ClassCount{Total: 3, Allowed: 1, Denied: 2},
		Process: ClassCount{Total: 2},
		Finding: ClassCount{Total: 1, Denied: 1},
		Other:   ClassCount{Total: 1},
		Skipped: 3,
	}
	if s.Counts != want {
		t.Fatalf("counts %+v; want %+v", s.Counts, want)
	}
	if len(s.Events) != 7 || s.Events[0].Activity != "open" || s.Events[6].ClassUID != UIDConfig {
		t.Fatalf("events %+v", s.Events)
	}
	if len(s.Skips) != 3 || !strings.HasPrefix(s.Skips[0], "line 9: ") {
		t.Fatalf("skips %q", s.Skips)
	}
	if got := s.Counts.String(); got != "network 3 (2 denied), process 2, findings 1, other 1; 3 unreadable line(s) skipped" {
		t.Fatalf("summary %q", got)
	}
	if got := (Counts{}).String(); got != "network 0 (0 denied), process 0, findings 0" {
		t.Fatalf("empty summary %q", got)
	}
}

// TestClip: an over-long field is clipped on a rune boundary.
func TestClip(t *testing.T) {
	cmd := strings.Repeat("é", MaxFieldBytes)
	e, err := Parse(Line{Level: "OCSF", Message: "PROC:LAUNCH [INFO] sh(1) [cmd:" + cmd + "]"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.Process.CmdLine); n > MaxFieldBytes+3 || !strings.HasSuffix(e.Process.CmdLine, "...") {
		t.Fatalf("cmd_line %d bytes", n)
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"shorthand.txt", "json.txt"} {
		for _, v := range fixtures(f, name) {
			f.Add(v)
		}
	}
	f.Add(`FINDING:X [INFO] "a\u{41}\"b" [type:t]`)
	f.Add("NET:OPEN [INFO] ALLOWED a(1) -> [::1]:443/tcp [reason:x]")
	f.Fuzz(func(t *testing.T, msg string) {
		e, err := Parse(Line{Level: "OCSF", Target: "ocsf", Message: msg})
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error %v is neither sentinel", err)
			}
			return
		}
		if !json.Valid(e.Raw) {
			t.Fatalf("raw %q is not JSON", e.Raw)
		}
		if _, err := json.Marshal(e); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{e.Message, e.Reason, e.Finding, e.URL, e.Policy} {
			if len(s) > MaxFieldBytes+3 {
				t.Fatalf("field of %d bytes", len(s))
			}
		}
	})
}
