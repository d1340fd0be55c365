package ferry_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay/relaytest"

	"github.com/ferry-dev/ferry/transfer"

	"go.uber.org/goleak"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/internal/waitfor"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/grpcbuf"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/archive"
)

func TestMain(m *testing.M) {
	grpcbuf.Install()
	// Children of this binary (launcher_test.go's) exit without the
	// second a -race build sleeps before it exits 0, unless the caller
	// set GORACE.
	if _, ok := os.LookupEnv("GORACE"); !ok {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	goleak.VerifyTestMain(m)
}

// env is one embedded gateway with a sandbox, and the sandbox's directory
// on this machine, which lets tests look at the remote side directly.
type env struct {
	sb   ferry.Sandbox
	root string // the sandbox's directory
}

func newEnv(t *testing.T, mode transfer.Mode) env { return newEnvVia(t, variant{Mode: mode}) }

// newEnvVia is newEnv for one variant: its mode over its transport.
func newEnvVia(t *testing.T, v variant) env {
	t.Helper()
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	return env{sb: sandboxVia(t, c, v), root: filepath.Join(g.Root, "box")}
}

// modes are what every transfer test runs in: the sandbox's own tools, and
// ferry's agent.
var modes = []transfer.Mode{transfer.ModePOSIX, transfer.ModeAgent}

// variant is one way a test reaches its sandbox: a transfer mode over a
// transport, the gateway's exec RPCs or SSH over its ForwardTcp relay.
type variant struct {
	transfer.Mode
	ssh bool
}

// forModes runs f in every mode over both transports: "posix", "agent"
// (exec RPCs), "posix-ssh", "agent-ssh".
func forModes(t *testing.T, f func(*testing.T, variant)) {
	for _, ssh := range []bool{false, true} {
		for _, m := range modes {
			name := m.String()
			if ssh {
				name += "-ssh"
			}
			t.Run(name, func(t *testing.T) { f(t, variant{Mode: m, ssh: ssh}) })
		}
	}
}

// sandboxFor is sandbox "box" through x in mode m.
func sandboxFor(t *testing.T, x relay.Execer, m transfer.Mode) ferry.Sandbox {
	sb := ferry.Sandbox{X: x, Name: "box", Mode: m}
	if m != transfer.ModePOSIX {
		sb.Agents = agenttest.Bundle(t)
	}
	return sb
}

// sandboxVia is sandbox "box" through c's gateway as v says: c itself, or
// SSH over c's gateway's relay (closed when t ends).
func sandboxVia(t *testing.T, c *openshell.Client, v variant) ferry.Sandbox {
	if !v.ssh {
		return sandboxFor(t, c, v.Mode)
	}
	x := c.SSH(openshell.SSHConfig{})
	t.Cleanup(func() { x.Close() })
	return sandboxFor(t, x, v.Mode)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// write makes files from a "path: content" map; a path ending in / is a
// directory.
func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tree lists root as "path: content" (directories end in /).
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			out[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rel] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func keys(m map[string]string) string {
	var k []string
	for p := range m {
		k = append(k, p)
	}
	sort.Strings(k)
	return strings.Join(k, " ")
}

func sameTree(t *testing.T, got, want map[string]string) {
	t.Helper()
	if keys(got) != keys(want) {
		t.Fatalf("tree: got %s\nwant %s", keys(got), keys(want))
	}
	for p, c := range want {
		if got[p] != c {
			t.Fatalf("%s: got %q want %q", p, got[p], c)
		}
	}
}

var src = map[string]string{
	"dir/a.txt":        "A",
	"dir/sub/b.txt":    "B",
	"dir/empty/":       "",
	"file.txt":         "F",
	"other.txt":        "O",
	"dir with space/x": "X",
}

// TestCopySemantics runs every cp case in both directions through the
// embedded gateway; each direction must give the same tree.
func TestCopySemantics(t *testing.T) { forModes(t, testCopySemantics) }

func testCopySemantics(t *testing.T, mode variant) {
	cases := []struct {
		name    string
		pre     map[string]string // at the destination side before the copy
		srcs    []string
		dst     string
		want    map[string]string // the destination side afterwards
		wantErr error
	}{
		{"DirIntoExistingDir", map[string]string{"d/": ""}, []string{"dir"}, "d",
			map[string]string{"d/": "", "d/dir/": "", "d/dir/a.txt": "A", "d/dir/sub/": "", "d/dir/sub/b.txt": "B", "d/dir/empty/": ""}, nil},
		{"DirToMissingPath", nil, []string{"dir"}, "new",
			map[string]string{"new/": "", "new/a.txt": "A", "new/sub/": "", "new/sub/b.txt": "B", "new/empty/": ""}, nil},
		{"DirContentsIntoExistingDir", map[string]string{"d/keep": "K"}, []string{"dir/."}, "d",
			map[string]string{"d/": "", "d/keep": "K", "d/a.txt": "A", "d/sub/": "", "d/sub/b.txt": "B", "d/empty/": ""}, nil},
		{"EmptyDirToMissingPath", nil, []string{"dir/empty"}, "e",
			map[string]string{"e/": ""}, nil},
		{"FileToMissingPathRenames", nil, []string{"file.txt"}, "renamed.txt",
			map[string]string{"renamed.txt": "F"}, nil},
		{"FileIntoExistingDir", map[string]string{"d/": ""}, []string{"file.txt"}, "d",
			map[string]string{"d/": "", "d/file.txt": "F"}, nil},
		{"FileOverFile", map[string]string{"t.txt": "old"}, []string{"file.txt"}, "t.txt",
			map[string]string{"t.txt": "F"}, nil},
		{"SeveralIntoExistingDir", map[string]string{"d/": ""}, []string{"file.txt", "other.txt", "dir with space"}, "d",
			map[string]string{"d/": "", "d/file.txt": "F", "d/other.txt": "O", "d/dir with space/": "", "d/dir with space/x": "X"}, nil},
		{"SeveralToMissingPath", nil, []string{"file.txt", "other.txt"}, "nope",
			map[string]string{}, transfer.ErrNotDir},
		{"MissingSource", nil, []string{"absent"}, "d2",
			map[string]string{}, transfer.ErrNoSource},
		{"DirOverFile", map[string]string{"t.txt": "old"}, []string{"dir"}, "t.txt",
			map[string]string{"t.txt": "old"}, errAny},
	}
	for _, dir := range []string{"Upload", "Download"} {
		t.Run(dir, func(t *testing.T) {
			e := newEnvVia(t, mode)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					// Fresh source and destination roots per case, on the
					// right sides.
					local := t.TempDir()
					remoteRel := "case-" + strings.ToLower(tc.name)
					remote := filepath.Join(e.root, remoteRel)
					if err := os.MkdirAll(remote, 0o755); err != nil {
						t.Fatal(err)
					}
					srcRoot, dstRoot := local, remote
					if dir == "Download" {
						srcRoot, dstRoot = remote, local
					}
					write(t, srcRoot, src)
					write(t, dstRoot, tc.pre)
					var err error
					if dir == "Upload" {
						var srcs []string
						for _, s := range tc.srcs {
							srcs = append(srcs, filepath.Join(local, s)+suffix(s))
						}
						_, err = ferry.Upload(ctx(t), e.sb, srcs, remoteRel+"/"+tc.dst)
					} else {
						var srcs []string
						for _, s := range tc.srcs {
							srcs = append(srcs, remoteRel+"/"+s)
						}
						_, err = ferry.Download(ctx(t), e.sb, srcs, filepath.Join(local, tc.dst), archive.Limits{})
					}
					if tc.wantErr != nil {
						if err == nil {
							t.Fatal("copy succeeded, want an error")
						}
						if tc.wantErr != errAny && !errors.Is(err, tc.wantErr) {
							t.Fatalf("err = %v, want %v", err, tc.wantErr)
						}
					} else if err != nil {
						t.Fatal(err)
					}
					got := tree(t, dstRoot)
					want := map[string]string{}
					for p, c := range tc.want {
						want[p] = c
					}
					sameTree(t, got, want)
				})
			}
		})
	}
}

// errAny in a case asks for an error of any kind.
var errAny = errors.New("any error")

func suffix(s string) string {
	if strings.HasSuffix(s, "/.") {
		return "/."
	}
	return ""
}

func TestPull(t *testing.T) { forModes(t, testPull) }

func testPull(t *testing.T, mode variant) {
	e := newEnvVia(t, mode)
	meta := filepath.Join(e.root, "rascal-meta")
	write(t, meta, map[string]string{"agent.ndjson": "{}\n", "runner.log": "queued\n"})
	out := t.TempDir()
	res, err := ferry.Pull(ctx(t), e.sb, ferry.PullSpec{Out: out})
	if !errors.Is(err, ferry.ErrNoMeta) {
		t.Fatalf("without meta.json: err = %v, want ErrNoMeta", err)
	}
	sameTree(t, tree(t, out), map[string]string{"agent.ndjson": "{}\n", "runner.log": "queued\n"})
	if !strings.Contains(strings.Join(res.Missing, " "), "meta.json") {
		t.Fatalf("missing = %v", res.Missing)
	}
	write(t, meta, map[string]string{"meta.json": `{"exit_code":0}`})
	res, err = ferry.Pull(ctx(t), e.sb, ferry.PullSpec{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Saved) != 3 {
		t.Fatalf("saved %v", res.Saved)
	}
}

func TestRunPullsAfterFailureAndKeepsSecretsOut(t *testing.T) {
	forModes(t, testRunPullsAfterFailureAndKeepsSecretsOut)
}

func testRunPullsAfterFailureAndKeepsSecretsOut(t *testing.T, mode variant) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	sb := sandboxVia(t, c, mode)
	local := t.TempDir()
	const secret = "s3cr3t-token-value-do-not-leak"
	write(t, local, map[string]string{"instructions.md": "do it", "gh_token": secret})
	out := filepath.Join(t.TempDir(), "run")
	var shown strings.Builder
	// The command proves the secret arrived (by its length and modes, so
	// that the secret never needs to be in the test's argv), writes
	// meta.json, and fails: the artifacts must come back anyway.
	script := `echo working; wc -c < .rascal-secrets/gh_token; stat -c '%a' .rascal-secrets .rascal-secrets/gh_token; ` +
		`mkdir -p rascal-meta; echo '{"exit_code":7}' > rascal-meta/meta.json; exit 7`
	res, err := ferry.Run(ctx(t), sb, ferry.RunSpec{
		Inputs:  []ferry.Mapping{{Local: filepath.Join(local, "instructions.md"), Remote: "rascal-meta/instructions.md"}},
		Secrets: []ferry.Mapping{{Local: filepath.Join(local, "gh_token"), Remote: ".rascal-secrets/gh_token"}},
		Argv:    []string{"sh", "-c", script},
		Out:     out,
		Stdout:  &shown,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || res.PullErr != nil {
		t.Fatalf("exit code %d pull err %v, want 7 and nil", res.ExitCode, res.PullErr)
	}
	if want := "working\n30\n700\n600\n"; shown.String() != want {
		t.Fatalf("command output %q, want %q", shown.String(), want)
	}
	b, err := os.ReadFile(filepath.Join(out, "meta.json"))
	if err != nil || !strings.Contains(string(b), `"exit_code":7`) {
		t.Fatalf("meta.json: %q %v", b, err)
	}
	if log, _ := os.ReadFile(filepath.Join(out, "runner.log")); !strings.Contains(string(log), "working") {
		t.Fatalf("runner.log lacks the command output: %q", log)
	}
	// Over SSH the gateway sees no exec request, only the connection
	// (the commands travel encrypted inside it).
	saw := "argv:"
	if mode.ssh {
		saw = "ssh connection open"
	}
	if seen := g.Seen.String(); strings.Contains(seen, secret) || !strings.Contains(seen, saw) {
		t.Fatalf("the gateway saw the secret (or nothing at all):\n%s", seen)
	}
	// Nothing of the secret may be left in the gateway's own records.
	filepath.WalkDir(filepath.Join(g.Root, ".gateway"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), secret) {
				t.Errorf("%s holds the secret", p)
			}
		}
		return nil
	})
}

func TestRunPullsAfterCancel(t *testing.T) { forModes(t, testRunPullsAfterCancel) }

func testRunPullsAfterCancel(t *testing.T, mode variant) {
	e := newEnvVia(t, mode)
	out := t.TempDir()
	c, cancel := context.WithCancel(ctx(t))
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := ferry.Run(c, e.sb, ferry.RunSpec{
			Argv: []string{"sh", "-c", `mkdir -p rascal-meta; echo '{"exit_code":1}' > rascal-meta/.m; mv rascal-meta/.m rascal-meta/meta.json; sleep 600`},
			Out:  out,
		})
		errc <- err
	}()
	// The cancel comes once the command has written meta.json, and is
	// in its sleep.
	waitfor.File(t, filepath.Join(e.root, "rascal-meta", "meta.json"), 30*time.Second)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, err := os.Stat(filepath.Join(out, "meta.json")); err != nil {
		t.Fatalf("meta.json not pulled after cancel: %v", err)
	}
}

// TestLoginBanner: a sandbox whose login profile prints a banner on stdout
// (and stderr) still copies exactly, in both modes.
func TestLoginBanner(t *testing.T) { forModes(t, testLoginBanner) }

func testLoginBanner(t *testing.T, mode variant) {
	e := newEnvVia(t, mode)
	profile := "echo 'Welcome to the sandbox!'; echo 'last login: never'; echo 'motd on stderr' >&2\n"
	if err := os.WriteFile(filepath.Join(e.root, ".profile"), []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
	local := t.TempDir()
	write(t, local, map[string]string{"src/a.txt": "A", "src/sub/b.txt": "B", "src/empty/": ""})
	if _, err := ferry.Upload(ctx(t), e.sb, []string{filepath.Join(local, "src")}, "up"); err != nil {
		t.Fatal(err)
	}
	sameTree(t, tree(t, filepath.Join(e.root, "up")), tree(t, filepath.Join(local, "src")))
	back := filepath.Join(t.TempDir(), "back")
	st, err := ferry.Download(ctx(t), e.sb, []string{"up"}, back, archive.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode != mode.String() {
		t.Errorf("mode %q, want %q", st.Mode, mode)
	}
	sameTree(t, tree(t, back), tree(t, filepath.Join(local, "src")))
}

// TestRunShowsLinesLive: in agent mode a run shows agent.ndjson's lines as
// they are written, each once, the last ones too (shown from the pulled
// copy if the follow had not reached them).
func TestRunShowsLinesLive(t *testing.T) {
	e := newEnv(t, transfer.ModeAgent)
	out := filepath.Join(t.TempDir(), "run")
	var lines syncBuffer
	script := `mkdir -p rascal-meta; echo '{"exit_code":0}' > rascal-meta/meta.json; ` +
		`i=0; while [ $i -lt 50 ]; do i=$((i+1)); echo "{\"n\":$i}" >> rascal-meta/agent.ndjson; ` +
		`if [ $((i % 10)) = 0 ]; then sleep 0.1; fi; done`
	res, err := ferry.Run(ctx(t), e.sb, ferry.RunSpec{Argv: []string{"sh", "-c", script}, Out: out, Lines: &lines})
	if err != nil || res.ExitCode != 0 || res.PullErr != nil {
		t.Fatalf("run: %v, exit %d, pull %v", err, res.ExitCode, res.PullErr)
	}
	want, _ := os.ReadFile(filepath.Join(out, "agent.ndjson"))
	if strings.Count(string(want), "\n") != 50 || lines.String() != string(want) {
		t.Fatalf("shown %q, pulled %q: want the 50 lines once each", lines.String(), want)
	}
}

// syncBuffer is read while an Exec writes it.
type syncBuffer = relaytest.SyncBuffer

// TestRunResumesSession runs twice on one session key: the second run
// finds what the first left in its session directory, and its save moves
// little.
func TestRunResumesSession(t *testing.T) { forModes(t, testRunResumesSession) }

func testRunResumesSession(t *testing.T, mode variant) {
	st, err := session.New(session.Config{Backend: mustDirBackend(t)})
	if err != nil {
		t.Fatal(err)
	}
	script := `mkdir -p rascal-meta sess; n=$(cat sess/t.jsonl 2>/dev/null | wc -l); echo "run after $n" >> sess/t.jsonl; ` +
		`echo "{\"exit_code\":0,\"seen\":$n}" > rascal-meta/meta.json`
	for run := 0; run < 2; run++ {
		e := newEnvVia(t, mode) // a fresh sandbox each run
		out := filepath.Join(t.TempDir(), "run")
		res, err := ferry.Run(ctx(t), e.sb, ferry.RunSpec{
			Argv: []string{"sh", "-c", script}, Out: out,
			Sessions: []ferry.SessionMapping{{Key: "task-1", Remote: "sess"}}, Store: st,
		})
		if err != nil || res.PullErr != nil || res.SessionErr != nil {
			t.Fatalf("run %d: %v / %v / %v", run, err, res.PullErr, res.SessionErr)
		}
		meta, _ := os.ReadFile(filepath.Join(out, "meta.json"))
		if want := fmt.Sprintf(`"seen":%d`, run); !strings.Contains(string(meta), want) {
			t.Fatalf("run %d: meta.json %s, want %s", run, meta, want)
		}
		if s := res.Sessions[0].Saved; s == nil || s.Snapshot != int64(run+1) {
			t.Fatalf("run %d: session %+v", run, res.Sessions[0])
		}
	}
}

func mustDirBackend(t *testing.T) session.Backend {
	t.Helper()
	b, err := local.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return b
}
