package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay/relaytest"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/sshexec/sshdtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// runWait bounds one in-process ferry invocation; the slowest (5 MiB
// through cat under -race) takes a few seconds.
const runWait = 60 * time.Second

// syncBuffer is read while an Exec writes it.
type syncBuffer = relaytest.SyncBuffer

type runResult struct {
	code           int
	stdout, stderr string
}

// runFerry runs the CLI in-process with args and stdin (nil: empty).
func runFerry(t *testing.T, stdin io.Reader, args ...string) runResult {
	t.Helper()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	ctx, cancel := context.WithTimeout(context.Background(), runWait)
	defer cancel()
	var out, errw syncBuffer
	code := run(ctx, args, stdin, &out, &errw)
	if ctx.Err() != nil {
		t.Fatalf("ferry %q did not finish within %v", args, runWait)
	}
	return runResult{code: code, stdout: out.String(), stderr: errw.String()}
}

// wantOK fails unless r is a success with nothing on stderr.
func wantOK(t *testing.T, r runResult) {
	t.Helper()
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q, stdout %q; want exit 0 and empty stderr", r.code, r.stderr, r.stdout)
	}
}

// wantFailure fails unless r is one of ferry's own failures: exit 1,
// nothing on stdout, and exactly one line "ferry: ..." on stderr that
// contains each of want.
func wantFailure(t *testing.T, r runResult, want ...string) {
	t.Helper()
	if r.code != 1 {
		t.Errorf("exit %d, want 1 (stderr %q)", r.code, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
	if !strings.HasPrefix(r.stderr, "ferry: ") || !strings.HasSuffix(r.stderr, "\n") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("stderr %q, want exactly one line \"ferry: ...\"", r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr %q does not mention %q", r.stderr, w)
		}
	}
}

// wantUsage fails unless r is a usage error: exit 2, nothing on stdout, and
// "ferry: <problem>" followed by the pointer to --help.
func wantUsage(t *testing.T, r runResult, want string) {
	t.Helper()
	if r.code != 2 {
		t.Errorf("exit %d, want 2 (stderr %q)", r.code, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ferry: ") || lines[1] != "Run 'ferry --help' for usage." {
		t.Errorf("stderr %q, want \"ferry: ...\" and the --help line", r.stderr)
	}
	if !strings.Contains(lines[0], want) {
		t.Errorf("stderr %q does not mention %q", r.stderr, want)
	}
}

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run go test -update if the change is intended)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// isolate gives the test an empty OpenShell world: no gateway in the
// environment, an empty user config dir (returned), and an empty system
// dir, so that nothing of the machine's own configuration is read.
func isolate(t *testing.T) string {
	t.Helper()
	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	// The S3 store's chunk cache lives there: never the machine's own.
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("FERRY_CACHE_DIR", "")
	t.Setenv("HOME", t.TempDir())
	t.Setenv("OPENSHELL_SYSTEM_GATEWAY_DIR", t.TempDir())
	for _, k := range []string{"OPENSHELL_GATEWAY", "OPENSHELL_GATEWAY_ENDPOINT", "OPENSHELL_GATEWAY_INSECURE", "OPENSHELL_WORKSPACE"} {
		t.Setenv(k, "")
	}
	return xdg
}

// startGateway starts an embedded gateway whose log is discarded, so that
// it never writes into the stderr of a ferry run.
func startGateway(t *testing.T, plaintext bool) *gatewaytest.Gateway {
	t.Helper()
	return gatewaytest.Start(t, gatewaytest.Options{
		Plaintext: plaintext,
		Config:    gateway.Config{Logger: slog.New(slog.DiscardHandler)},
	})
}

// storeGateway writes an OpenShell gateway record under xdg as the
// openshell CLI does: gateways/<name>/metadata.json for endpoint with mTLS
// auth, and the client files of certDir (a `ferry gateway certs` dir) in
// gateways/<name>/mtls. With active, it is also the active gateway.
func storeGateway(t *testing.T, xdg, name, endpoint, certDir string, active bool) {
	t.Helper()
	dir := filepath.Join(xdg, "openshell", "gateways", name)
	md, err := json.Marshal(map[string]string{"name": name, "gateway_endpoint": endpoint, "auth_mode": "mtls"})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "metadata.json"), md, 0o644)
	for _, f := range []string{"ca.crt", "tls.crt", "tls.key"} {
		b, err := os.ReadFile(filepath.Join(certDir, "client", f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "mtls", f), b, 0o600)
	}
	if active {
		writeFile(t, filepath.Join(xdg, "openshell", "active_gateway"), []byte(name+"\n"), 0o644)
	}
}

func writeFile(t *testing.T, path string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
}

// activeGateway starts an mTLS gateway and makes it the active OpenShell
// gateway of an isolated config, so that ferry reaches it through settings
// resolution alone, with no flag or variable naming it.
func activeGateway(t *testing.T) *gatewaytest.Gateway {
	t.Helper()
	xdg := isolate(t)
	g := startGateway(t, false)
	storeGateway(t, xdg, "ferry-test", "https://"+g.Addr, g.CertDir, true)
	return g
}

func TestHelpGolden(t *testing.T) {
	isolate(t)
	for _, path := range [][]string{
		{},
		{"gateway"},
		{"gateway", "serve"},
		{"gateway", "certs"},
		{"sandbox"},
		{"sandbox", "create"},
		{"sandbox", "get"},
		{"sandbox", "delete"},
		{"sandbox", "stop"},
		{"sandbox", "start"},
		{"sandbox", "list"},
		{"sandbox", "events"},
		{"provider"},
		{"provider", "create"},
		{"provider", "get"},
		{"provider", "list"},
		{"provider", "delete"},
		{"exec"},
		{"cp"},
		{"pull"},
		{"run"},
		{"diff"},
		{"session", "key"},
		{"policy"},
		{"policy", "show"},
		{"policy", "check"},
	} {
		name := "ferry"
		if len(path) > 0 {
			name = strings.Join(path, "-")
		}
		t.Run(name, func(t *testing.T) {
			r := runFerry(t, nil, append(path, "--help")...)
			wantOK(t, r)
			golden(t, filepath.Join("help", name+".golden"), r.stdout)
		})
	}
}

var (
	uuidRE    = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	idField   = regexp.MustCompile(`"id":"[^"]*"`)
	timeField = regexp.MustCompile(`"created":"[^"]*"`)
)

// normalizeJSON checks the volatile fields of ferry's sandbox JSON (a
// UUID id, a recent RFC 3339 creation time) and replaces them with
// placeholders, leaving the rest byte for byte as printed.
func normalizeJSON(t *testing.T, out string) string {
	t.Helper()
	var sbs []sandboxJSON
	trimmed := strings.TrimSpace(out)
	if strings.HasPrefix(trimmed, "[") {
		if err := json.Unmarshal([]byte(trimmed), &sbs); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
	} else {
		var sb sandboxJSON
		if err := json.Unmarshal([]byte(trimmed), &sb); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
		sbs = append(sbs, sb)
	}
	for _, sb := range sbs {
		if sb.ID == "" && sb.Created == "" {
			continue // delete's answer has neither
		}
		if !uuidRE.MatchString(sb.ID) {
			t.Errorf("sandbox %s: id %q is not a UUID", sb.Name, sb.ID)
		}
		created, err := time.Parse(time.RFC3339, sb.Created)
		if err != nil || time.Since(created) > time.Hour || time.Until(created) > time.Minute {
			t.Errorf("sandbox %s: created %q is not a recent RFC 3339 time (%v)", sb.Name, sb.Created, err)
		}
	}
	out = idField.ReplaceAllString(out, `"id":"ID"`)
	return timeField.ReplaceAllString(out, `"created":"CREATED"`)
}

func TestSandboxLifecycle(t *testing.T) {
	g := activeGateway(t)

	r := runFerry(t, nil, "sandbox", "create", "alpha")
	wantOK(t, r)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], "alpha ") || !strings.Contains(lines[1], " ready ") {
		t.Fatalf("create printed %q, want a header and a row for alpha, ready", r.stdout)
	}

	r = runFerry(t, nil, "--json", "sandbox", "create", "beta")
	wantOK(t, r)
	golden(t, "json/create.golden", normalizeJSON(t, r.stdout))

	r = runFerry(t, nil, "sandbox", "get", "--json", "alpha")
	wantOK(t, r)
	golden(t, "json/get.golden", normalizeJSON(t, r.stdout))

	r = runFerry(t, nil, "sandbox", "list", "--json")
	wantOK(t, r)
	golden(t, "json/list.golden", normalizeJSON(t, r.stdout))

	r = runFerry(t, nil, "sandbox", "list")
	wantOK(t, r)
	if lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); len(lines) != 3 ||
		!strings.HasPrefix(lines[1], "alpha ") || !strings.HasPrefix(lines[2], "beta ") {
		t.Errorf("list printed %q, want a header, alpha and beta", r.stdout)
	}

	r = runFerry(t, nil, "--quiet", "sandbox", "create", "gamma")
	wantOK(t, r)
	if r.stdout != "" {
		t.Errorf("create --quiet printed %q", r.stdout)
	}

	wantFailure(t, runFerry(t, nil, "sandbox", "get", "nosuch"), "nosuch", "not found")
	wantFailure(t, runFerry(t, nil, "sandbox", "create", "alpha"), "alpha", "exists")
	wantFailure(t, runFerry(t, nil, "sandbox", "create", "Bad_Name"), "Bad_Name")

	r = runFerry(t, nil, "sandbox", "delete", "alpha")
	wantOK(t, r)
	if r.stdout != "deleted alpha\n" {
		t.Errorf("delete printed %q, want \"deleted alpha\\n\"", r.stdout)
	}
	r = runFerry(t, nil, "--json", "sandbox", "delete", "beta")
	wantOK(t, r)
	golden(t, "json/delete.golden", normalizeJSON(t, r.stdout))

	wantFailure(t, runFerry(t, nil, "sandbox", "delete", "alpha"), "alpha", "not found")
	wantFailure(t, runFerry(t, nil, "sandbox", "get", "beta"), "beta", "not found")

	r = runFerry(t, nil, "--json", "sandbox", "list")
	wantOK(t, r)
	if got := normalizeJSON(t, r.stdout); got != `[{"name":"gamma","id":"ID","workspace":"default","phase":"ready","created":"CREATED"}]`+"\n" {
		t.Errorf("list after deletes printed %q, want only gamma", got)
	}

	// A workspace is a separate namespace, once created.
	if _, err := g.Server.CreateWorkspace(context.Background(), &openshellv1.CreateWorkspaceRequest{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	r = runFerry(t, nil, "--workspace", "other", "--json", "sandbox", "list")
	wantOK(t, r)
	if r.stdout != "[]\n" {
		t.Errorf("list in another workspace printed %q, want []", r.stdout)
	}
}

func TestExec(t *testing.T) {
	g := activeGateway(t)
	wantOK(t, runFerry(t, nil, "sandbox", "create", "box"))

	t.Run("stdin", func(t *testing.T) {
		data := make([]byte, 5<<20)
		rand.Read(data)
		r := runFerry(t, bytes.NewReader(data), "exec", "box", "--", "cat")
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
		if r.stdout != string(data) {
			t.Fatalf("cat returned %d bytes that differ from the %d sent", len(r.stdout), len(data))
		}
	})

	for _, tc := range []struct {
		name           string
		stdin          string
		args           []string
		code           int
		stdout, stderr string
	}{
		{"streams apart", "", []string{"--", "sh", "-c", "echo out; echo err >&2; echo out2"}, 0, "out\nout2\n", "err\n"},
		{"exit 0", "", []string{"--", "true"}, 0, "", ""},
		{"exit 3", "", []string{"--", "sh", "-c", "exit 3"}, 3, "", ""},
		{"exit 42 with output", "", []string{"--", "sh", "-c", "echo partial; echo why >&2; exit 42"}, 42, "partial\n", "why\n"},
		{"stdin to a pipeline", "b\na\n", []string{"--", "sh", "-c", "sort | tr a-z A-Z"}, 0, "A\nB\n", ""},
		{"env", "", []string{"--env", "K=v w", "-e", "EMPTY=", "--env", "EQ=a=b", "--", "sh", "-c", `printf '%s|%s|%s|%s' "$K" "${EMPTY-unset}" "$EQ" "$HOME"`}, 0, "v w||a=b|" + filepath.Join(g.Root, "box"), ""},
		{"arguments arrive exactly", "", []string{"--", "printf", `[%s]\n`,
			"two words", `"double"`, `'single'`, `$(echo injected)`, "`id`", "$HOME", "*", "?", "~", "a;b", "a|b", "a&&b", "", " ", `back\slash`, "tab\there", "ünï"},
			0, "[two words]\n[\"double\"]\n['single']\n[$(echo injected)]\n[`id`]\n[$HOME]\n[*]\n[?]\n[~]\n[a;b]\n[a|b]\n[a&&b]\n[]\n[ ]\n[back\\slash]\n[tab\there]\n[ünï]\n", ""},
		{"dash arguments", "", []string{"--", "printf", "%s,", "--", "-x", "--json"}, 0, "--,-x,--json,", ""},
		// Upstream refuses only NUL in an argument: an inline script may
		// run to several lines.
		{"multi-line script", "", []string{"--", "sh", "-c", "echo one\necho two"}, 0, "one\ntwo\n", ""},
		// The one OPENSHELL_ key upstream lets an exec set (exec_python's).
		{"pyfunc env key", "", []string{"--env", "OPENSHELL_PYFUNC_B64=cGF5", "--", "sh", "-c", `printf %s "$OPENSHELL_PYFUNC_B64"`}, 0, "cGF5", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runFerry(t, strings.NewReader(tc.stdin), append([]string{"exec", "box"}, tc.args...)...)
			if r.code != tc.code || r.stdout != tc.stdout || r.stderr != tc.stderr {
				t.Errorf("got exit %d, stdout %q, stderr %q\nwant exit %d, stdout %q, stderr %q",
					r.code, r.stdout, r.stderr, tc.code, tc.stdout, tc.stderr)
			}
		})
	}

	t.Run("workdir", func(t *testing.T) {
		wantOK(t, runFerry(t, nil, "exec", "box", "--", "mkdir", "-p", "sub/dir with space"))
		r := runFerry(t, nil, "exec", "box", "--workdir", "sub/dir with space", "--", "pwd")
		wantOK(t, r)
		if want := filepath.Join(g.Root, "box", "sub", "dir with space") + "\n"; r.stdout != want {
			t.Errorf("pwd printed %q, want %q", r.stdout, want)
		}
		wantOK(t, runFerry(t, strings.NewReader("hello"), "exec", "box", "-w", "sub", "--", "sh", "-c", "cat > f"))
		b, err := os.ReadFile(filepath.Join(g.Root, "box", "sub", "f"))
		if err != nil || string(b) != "hello" {
			t.Errorf("file written in --workdir sub: %q, %v", b, err)
		}
		r = runFerry(t, nil, "exec", "box", "--workdir", "missing", "--", "true")
		if r.code == 0 {
			t.Errorf("exec in a missing --workdir exited 0")
		}
	})

	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		r := runFerry(t, nil, "exec", "box", "--timeout", "1s", "--", "sleep", "30")
		if r.code != 124 || r.stdout != "" || r.stderr != "" {
			t.Errorf("exit %d, stdout %q, stderr %q; want 124 and no output", r.code, r.stdout, r.stderr)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("took %v to time out after 1s", d)
		}
	})

	t.Run("interrupt", func(t *testing.T) {
		// main cancels run's context on SIGINT/SIGTERM: ferry exits 130,
		// as a shell reports a command killed by SIGINT, and the remote
		// process is stopped.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var out, errw syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"exec", "box", "--", "sh", "-c", "echo $$ > pid; echo started; exec sleep 30"}, strings.NewReader(""), &out, &errw)
		}()
		deadline := time.After(10 * time.Second)
		for out.String() != "started\n" {
			select {
			case code := <-done:
				t.Fatalf("exec exited %d before it was interrupted; stdout %q, stderr %q", code, out.String(), errw.String())
			case <-deadline:
				cancel()
				<-done
				t.Fatalf("no \"started\" within 10s; stdout %q", out.String())
			case <-time.After(10 * time.Millisecond):
			}
		}
		cancel()
		select {
		case code := <-done:
			if code != 130 || errw.String() != "" {
				t.Errorf("exit %d, stderr %q after interrupt; want 130 and nothing", code, errw.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("exec did not return within 10s of the interrupt")
		}
		pid, err := os.ReadFile(filepath.Join(g.Root, "box", "pid"))
		if err != nil {
			t.Fatal(err)
		}
		proc := filepath.Join("/proc", strings.TrimSpace(string(pid)))
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			// A zombie waiting for the gateway to reap it counts as gone.
			stat, err := os.ReadFile(filepath.Join(proc, "stat"))
			if err != nil || bytes.Contains(stat, []byte(") Z ")) {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("the remote sleep (pid %s) still runs 10s after the interrupt", pid)
			}
		}
	})

	t.Run("unknown sandbox", func(t *testing.T) {
		wantFailure(t, runFerry(t, nil, "exec", "nosuch", "--", "true"), "nosuch", "not found")
	})
}

func TestExecUsage(t *testing.T) {
	// Usage errors are found before any gateway is dialled: there is none.
	isolate(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing --", []string{"exec", "box", "echo", "hi"}, "put -- between"},
		{"-- before the sandbox", []string{"exec", "--", "echo", "hi"}, "put -- between"},
		{"missing command", []string{"exec", "box", "--"}, "needs a sandbox and a command"},
		{"missing everything", []string{"exec"}, "needs a sandbox and a command"},
		{"env without =", []string{"exec", "box", "--env", "NOEQUALS", "--", "true"}, `--env "NOEQUALS"`},
		{"env empty key", []string{"exec", "box", "--env", "=v", "--", "true"}, `--env "=v"`},
		{"env bad key", []string{"exec", "box", "--env", "1X=v", "--", "true"}, "1X"},
		{"env reserved key", []string{"exec", "box", "--env", "OPENSHELL_X=v", "--", "true"}, "OPENSHELL_"},
		{"NUL in argument", []string{"exec", "box", "--", "echo", "a\x00b"}, "contains NUL"},
		{"newline in env value", []string{"exec", "box", "--env", "K=a\nb", "--", "true"}, "newline"},
		{"newline in workdir", []string{"exec", "box", "--workdir", "a\nb", "--", "true"}, "workdir"},
		{"negative timeout", []string{"exec", "box", "--timeout", "-1s", "--", "true"}, "--timeout"},
		{"bad timeout", []string{"exec", "box", "--timeout", "soon", "--", "true"}, "soon"},
		{"unknown flag", []string{"exec", "box", "--bogus", "--", "true"}, "unknown flag: --bogus"},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"bare gateway", []string{"gateway"}, "serve or certs"},
		{"bare sandbox", []string{"sandbox"}, "create, get, delete, stop, start, list or events"},
		{"sandbox get without name", []string{"sandbox", "get"}, "takes 1 argument"},
		{"sandbox list with name", []string{"sandbox", "list", "x"}, "takes 0 argument"},
		{"sandbox create bad env", []string{"sandbox", "create", "x", "--env", "NOEQUALS"}, `--env "NOEQUALS"`},
		{"sandbox over ssh", []string{"--ssh", "me@127.0.0.1", "sandbox", "list"}, "--ssh"},
		{"bad ssh address", []string{"--ssh", "me@", "exec", "box", "--", "true"}, "no host"},
		{"certs without dir", []string{"gateway", "certs"}, "takes 1 argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantUsage(t, runFerry(t, nil, tc.args...), tc.want)
		})
	}
}

// TestGatewaySelection reaches gateways the other ways the settings allow,
// and checks that each way of failing to reach one is one clear line.
func TestGatewaySelection(t *testing.T) {
	t.Run("--gateway plaintext", func(t *testing.T) {
		isolate(t)
		g := startGateway(t, true)
		url := "http://" + g.Addr
		wantOK(t, runFerry(t, nil, "--gateway", url, "--quiet", "sandbox", "create", "plain"))
		r := runFerry(t, strings.NewReader("through plaintext"), "exec", "--gateway", url, "plain", "--", "cat")
		wantOK(t, r)
		if r.stdout != "through plaintext" {
			t.Errorf("stdout %q", r.stdout)
		}
		// Without the flag nothing names this gateway.
		wantFailure(t, runFerry(t, nil, "exec", "plain", "--", "true"), "no active gateway")
	})

	t.Run("OPENSHELL_GATEWAY_ENDPOINT", func(t *testing.T) {
		// The endpoint comes from the environment; the mTLS files from the
		// stored gateway whose endpoint it matches, which is not active.
		xdg := isolate(t)
		g := startGateway(t, false)
		storeGateway(t, xdg, "by-endpoint", "https://"+g.Addr+"/", g.CertDir, false)
		t.Setenv("OPENSHELL_GATEWAY_ENDPOINT", "https://"+g.Addr)
		wantOK(t, runFerry(t, nil, "--quiet", "sandbox", "create", "env"))
		r := runFerry(t, nil, "exec", "env", "--", "echo", "hi")
		wantOK(t, r)
		if r.stdout != "hi\n" {
			t.Errorf("stdout %q", r.stdout)
		}
	})

	t.Run("OPENSHELL_GATEWAY", func(t *testing.T) {
		xdg := isolate(t)
		g := startGateway(t, false)
		storeGateway(t, xdg, "named", "https://"+g.Addr, g.CertDir, false)
		t.Setenv("OPENSHELL_GATEWAY", "named")
		r := runFerry(t, nil, "--json", "sandbox", "list")
		wantOK(t, r)
		if r.stdout != "[]\n" {
			t.Errorf("stdout %q", r.stdout)
		}
	})

	t.Run("no active gateway", func(t *testing.T) {
		isolate(t)
		wantFailure(t, runFerry(t, nil, "exec", "box", "--", "true"),
			"no active gateway", "--gateway", "OPENSHELL_GATEWAY_ENDPOINT", "openshell CLI")
		wantFailure(t, runFerry(t, nil, "sandbox", "list"), "no active gateway")
	})

	t.Run("unreachable", func(t *testing.T) {
		// The credentials exist, under the name an unnamed loopback
		// endpoint is given; only the connection fails.
		xdg := isolate(t)
		certs := filepath.Join(t.TempDir(), "certs")
		if err := gateway.WriteCerts(certs, nil); err != nil {
			t.Fatal(err)
		}
		storeGateway(t, xdg, "openshell", "https://127.0.0.1:1", certs, false)
		start := time.Now()
		wantFailure(t, runFerry(t, nil, "--gateway", "https://127.0.0.1:1", "exec", "box", "--", "true"),
			"https://127.0.0.1:1", "unreachable")
		wantFailure(t, runFerry(t, nil, "--gateway", "https://127.0.0.1:1", "sandbox", "list"),
			"https://127.0.0.1:1", "unreachable")
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("took %v to report a refused connection", d)
		}
	})

	t.Run("missing credentials", func(t *testing.T) {
		xdg := isolate(t)
		wantFailure(t, runFerry(t, nil, "--gateway", "https://127.0.0.1:1", "sandbox", "list"),
			filepath.Join(xdg, "openshell", "gateways", "openshell", "mtls", "ca.crt"), "does not exist")
	})

	t.Run("bad endpoint", func(t *testing.T) {
		isolate(t)
		wantFailure(t, runFerry(t, nil, "--gateway", "ftp://127.0.0.1:1", "sandbox", "list"), "ftp", "--gateway")
	})

	t.Run("TLS refused", func(t *testing.T) {
		// The client trusts, and presents a certificate from, a CA the
		// gateway has never seen.
		xdg := isolate(t)
		g := startGateway(t, false)
		other := filepath.Join(t.TempDir(), "other")
		if err := gateway.WriteCerts(other, nil); err != nil {
			t.Fatal(err)
		}
		storeGateway(t, xdg, "wrong-ca", "https://"+g.Addr, other, true)
		wantFailure(t, runFerry(t, nil, "exec", "box", "--", "true"), "https://"+g.Addr, "certificate")
		wantFailure(t, runFerry(t, nil, "sandbox", "create", "never"), "https://"+g.Addr, "certificate")
	})

	t.Run("plaintext client, TLS gateway", func(t *testing.T) {
		isolate(t)
		g := startGateway(t, false)
		wantFailure(t, runFerry(t, nil, "--gateway", "http://"+g.Addr, "sandbox", "list"), "http://"+g.Addr)
	})
}

func TestExecSSH(t *testing.T) {
	isolate(t)
	s := sshdtest.Start(t)
	target := s.User + "@" + s.Addr
	empty := filepath.Join(t.TempDir(), "known_hosts")
	writeFile(t, empty, nil, 0o600)

	r := runFerry(t, nil, "exec", "--ssh", target, "--ssh-identity", s.IdentityFile, "--ssh-known-hosts", s.KnownHosts, "box", "--", "echo", "hi")
	wantOK(t, r)
	if r.stdout != "hi\n" {
		t.Errorf("stdout %q, want \"hi\\n\"", r.stdout)
	}

	r = runFerry(t, strings.NewReader("in"), "--ssh", target, "--ssh-identity", s.IdentityFile, "--ssh-known-hosts", s.KnownHosts,
		"exec", "box", "--env", "K=v", "--", "sh", "-c", `cat; printf '[%s]' "$K" "$1"; echo err >&2; exit 7`, "sh", "a b")
	if r.code != 7 || r.stdout != "in[v][a b]" || r.stderr != "err\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 7, \"in[v][a b]\", \"err\\n\"", r.code, r.stdout, r.stderr)
	}

	wantFailure(t, runFerry(t, nil, "exec", "--ssh", target, "--ssh-identity", s.IdentityFile, "--ssh-known-hosts", empty, "box", "--", "echo", "hi"),
		"unknown host key", s.Addr, empty)

	r = runFerry(t, nil, "exec", "--ssh", target, "--ssh-identity", s.IdentityFile, "--ssh-known-hosts", empty, "--ssh-insecure-ignore-host-key", "box", "--", "echo", "hi")
	wantOK(t, r)
	if r.stdout != "hi\n" {
		t.Errorf("with --ssh-insecure-ignore-host-key: stdout %q, want \"hi\\n\"", r.stdout)
	}
}

func TestGatewayCerts(t *testing.T) {
	isolate(t)
	dir := filepath.Join(t.TempDir(), "certs")
	r := runFerry(t, nil, "gateway", "certs", "--host", "gw.example", dir)
	wantOK(t, r)
	if r.stdout != "wrote certificates to "+dir+"\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	for name, secret := range map[string]bool{
		"ca.crt": false, "ca.key": true, "server.crt": false, "server.key": true,
		"client/ca.crt": false, "client/tls.crt": false, "client/tls.key": true,
	} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		switch perm := fi.Mode().Perm(); {
		case !fi.Mode().IsRegular() || fi.Size() == 0:
			t.Errorf("%s: mode %v, size %d: want a non-empty regular file", name, fi.Mode(), fi.Size())
		case secret && perm != 0o600:
			t.Errorf("%s: mode %v, want 0600", name, perm)
		case !secret && (perm&0o600 != 0o600 || perm&0o022 != 0):
			t.Errorf("%s: mode %v, want 0644 less the umask", name, perm)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("certificate dir: %v, %v; want mode 0700", fi.Mode(), err)
	}
	before, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}

	wantFailure(t, runFerry(t, nil, "gateway", "certs", dir), filepath.Join(dir, "ca.crt"), "exists")
	if after, err := os.ReadFile(filepath.Join(dir, "ca.key")); err != nil || !bytes.Equal(before, after) {
		t.Errorf("a second run changed ca.key (%v)", err)
	}
	wantFailure(t, runFerry(t, nil, "gateway", "certs", "--host", "not a host", filepath.Join(t.TempDir(), "x")), "not a host")
}

func TestGatewayServeUsage(t *testing.T) {
	isolate(t)
	root, certs := t.TempDir(), t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no --listen", []string{"--root", root, "--plaintext"}, "--listen"},
		{"no --root", []string{"--listen", "127.0.0.1:0", "--plaintext"}, "--root"},
		{"neither transport", []string{"--listen", "127.0.0.1:0", "--root", root}, "exactly one of --tls-dir DIR and --plaintext"},
		{"both transports", []string{"--listen", "127.0.0.1:0", "--root", root, "--plaintext", "--tls-dir", certs}, "exactly one of --tls-dir DIR and --plaintext"},
		{"plaintext on any address", []string{"--listen", "0.0.0.0:0", "--root", root, "--plaintext"}, "--plaintext-any-address"},
		{"plaintext on a bad address", []string{"--listen", "nowhere", "--root", root, "--plaintext"}, "nowhere"},
		{"any address without plaintext", []string{"--listen", "0.0.0.0:0", "--root", root, "--tls-dir", certs, "--plaintext-any-address"}, "goes with --plaintext"},
		{"argument", []string{"--listen", "127.0.0.1:0", "--root", root, "--plaintext", "extra"}, "takes 0 argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantUsage(t, runFerry(t, nil, append([]string{"gateway", "serve"}, tc.args...)...), tc.want)
		})
	}
	t.Run("tls dir without certificates", func(t *testing.T) {
		wantFailure(t, runFerry(t, nil, "gateway", "serve", "--listen", "127.0.0.1:0", "--root", root, "--tls-dir", t.TempDir()))
	})
}

var listeningRE = regexp.MustCompile(`listening on (127\.0\.0\.1:[0-9]+) \(mTLS\)\n`)

// TestGatewayServe runs `ferry gateway serve` as a user would, with
// certificates from `ferry gateway certs`, drives it with ferry itself, and
// stops it the way a signal does: by cancelling run's context.
func TestGatewayServe(t *testing.T) {
	xdg := isolate(t)
	certs := filepath.Join(t.TempDir(), "certs")
	wantOK(t, runFerry(t, nil, "--quiet", "gateway", "certs", certs))
	root := t.TempDir()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"gateway", "serve", "--listen", "127.0.0.1:0", "--root", root, "--tls-dir", certs}, strings.NewReader(""), &stdout, &stderr)
	}()
	// Whatever happens below, the server goroutine ends before the test.
	stopped := false
	stop := func() int {
		t.Helper()
		cancel()
		select {
		case code := <-done:
			stopped = true
			return code
		case <-time.After(10 * time.Second):
			t.Fatalf("gateway serve did not return within 10s of cancel; stderr:\n%s", stderr.String())
			return -1
		}
	}
	defer func() {
		if !stopped {
			stop()
		}
	}()

	var addr string
	deadline := time.Now().Add(10 * time.Second)
	for addr == "" {
		if m := listeningRE.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
			break
		}
		select {
		case code := <-done:
			stopped = true
			t.Fatalf("gateway serve exited %d before listening; stderr:\n%s", code, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no \"listening on\" line within 10s; stderr:\n%s", stderr.String())
		}
	}

	storeGateway(t, xdg, "served", "https://"+addr, certs, true)
	wantOK(t, runFerry(t, nil, "--quiet", "sandbox", "create", "served-box"))
	r := runFerry(t, strings.NewReader("over the served gateway"), "exec", "served-box", "--", "sh", "-c", "cat; pwd; exit 5")
	if want := "over the served gateway" + filepath.Join(root, "served-box") + "\n"; r.code != 5 || r.stdout != want || r.stderr != "" {
		t.Errorf("exec: exit %d, stdout %q, stderr %q; want 5, %q, nothing", r.code, r.stdout, r.stderr, want)
	}
	if fi, err := os.Stat(filepath.Join(root, "served-box")); err != nil || !fi.IsDir() {
		t.Errorf("sandbox dir under --root: %v", err)
	}

	if code := stop(); code != 0 {
		t.Errorf("gateway serve exited %d after cancel, want 0; stderr:\n%s", code, stderr.String())
	}
	if stdout.String() != "" {
		t.Errorf("gateway serve printed %q on stdout", stdout.String())
	}
	if !strings.Contains(stderr.String(), "gateway stopped") {
		t.Errorf("gateway serve stderr has no \"gateway stopped\" line:\n%s", stderr.String())
	}
}
