package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay/sshexec/sshdtest"
)

func TestCpCLI(t *testing.T) {
	for _, mode := range []string{"posix", "auto"} {
		t.Run(mode, func(t *testing.T) { testCpCLI(t, mode) })
	}
}

// testCpCLI copies up and back; auto mode picks the agent, which the tests
// build.
func testCpCLI(t *testing.T, mode string) {
	want := map[string]string{"posix": "posix", "auto": "agent"}[mode]
	g := activeGateway(t)
	wantOK(t, runFerry(t, nil, "sandbox", "create", "box", "-q"))
	local := t.TempDir()
	writeFile(t, filepath.Join(local, "src", "a.txt"), []byte("A"), 0o640)
	writeFile(t, filepath.Join(local, "src", "sub", "b.txt"), []byte("BB"), 0o600)
	if err := os.Symlink("a.txt", filepath.Join(local, "src", "link")); err != nil {
		t.Fatal(err)
	}

	r := runFerry(t, nil, "--json", "--mode", mode, "cp", filepath.Join(local, "src"), "box:work/src")
	if r.code != 0 {
		t.Fatalf("cp up: exit %d: %s", r.code, r.stderr)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("cp --json: %v: %q", err, r.stdout)
	}
	for _, k := range []string{"files", "bytes", "wire_bytes", "seconds", "mode"} {
		if _, ok := st[k]; !ok {
			t.Errorf("cp --json lacks %q: %s", k, r.stdout)
		}
	}
	if st["files"].(float64) != 2 || st["bytes"].(float64) != 3 || st["mode"] != want {
		t.Errorf("cp --json: %s", r.stdout)
	}
	if b, err := os.ReadFile(filepath.Join(g.Root, "box", "work", "src", "sub", "b.txt")); err != nil || string(b) != "BB" {
		t.Fatalf("uploaded file: %q %v", b, err)
	}

	back := filepath.Join(t.TempDir(), "back")
	r = runFerry(t, nil, "-q", "--mode", mode, "cp", "box:work/src", back)
	wantOK(t, r)
	for _, p := range []string{"a.txt", "sub/b.txt"} {
		want, _ := os.ReadFile(filepath.Join(local, "src", p))
		got, err := os.ReadFile(filepath.Join(back, p))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s: got %q want %q (%v)", p, got, want, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(back, "sub", "b.txt")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode not kept: %v %v", fi.Mode(), err)
	}
	if l, err := os.Readlink(filepath.Join(back, "link")); err != nil || l != "a.txt" {
		t.Errorf("symlink not kept: %q %v", l, err)
	}

	wantFailure(t, runFerry(t, nil, "cp", filepath.Join(local, "absent"), "box:x"), "absent")
	wantFailure(t, runFerry(t, nil, "cp", "box:work/absent", filepath.Join(local, "x")), "work/absent")
	wantUsage(t, runFerry(t, nil, "cp", "box:a", "box:b"), "exactly one side")
	wantUsage(t, runFerry(t, nil, "cp", local, filepath.Join(local, "x")), "exactly one side")
	wantUsage(t, runFerry(t, nil, "cp", "box:a"), "at least one source")
}

func TestPullCLI(t *testing.T) {
	g := activeGateway(t)
	wantOK(t, runFerry(t, nil, "sandbox", "create", "box", "-q"))
	meta := filepath.Join(g.Root, "box", "rascal-meta")
	writeFile(t, filepath.Join(meta, "agent.ndjson"), []byte("{}\n"), 0o644)
	writeFile(t, filepath.Join(meta, "runner.log"), []byte("queued\n"), 0o644)
	out := filepath.Join(t.TempDir(), "out")

	r := runFerry(t, nil, "pull", "box", "--out", out)
	if r.code != 3 || !strings.Contains(r.stderr, "meta.json") {
		t.Fatalf("pull without meta.json: exit %d, stderr %q; want 3 naming meta.json", r.code, r.stderr)
	}
	if got := names(t, out); got != "agent.ndjson runner.log" {
		t.Fatalf("saved %q, want the artifacts that exist", got)
	}

	writeFile(t, filepath.Join(meta, "meta.json"), []byte(`{"exit_code":0}`), 0o644)
	r = runFerry(t, nil, "--json", "pull", "box", "--out", out)
	if r.code != 0 {
		t.Fatalf("pull: exit %d %s", r.code, r.stderr)
	}
	var res struct{ Saved, Missing []string }
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || len(res.Saved) != 3 || len(res.Missing) != 4 {
		t.Fatalf("pull --json: %q %v", r.stdout, err)
	}

	// Another directory, and the default --out (./SANDBOX).
	writeFile(t, filepath.Join(g.Root, "box", "elsewhere", "meta.json"), []byte(`{}`), 0o644)
	t.Chdir(t.TempDir())
	wantOK(t, runFerry(t, nil, "-q", "pull", "box", "--meta-dir", "elsewhere"))
	if _, err := os.Stat(filepath.Join("box", "meta.json")); err != nil {
		t.Fatal(err)
	}
}

func TestRunCLI(t *testing.T) {
	activeGateway(t)
	local := t.TempDir()
	writeFile(t, filepath.Join(local, "instructions.md"), []byte("do it\n"), 0o644)
	writeFile(t, filepath.Join(local, "token"), []byte("tok-never-shown"), 0o600)
	out := filepath.Join(t.TempDir(), "run")
	script := `cat rascal-meta/instructions.md; echo '{"exit_code":5}' > rascal-meta/meta.json; echo oops >&2; exit 5`
	r := runFerry(t, nil, "run", "fresh", "--create", "default", "--delete", "--out", out,
		"--in", filepath.Join(local, "instructions.md")+":rascal-meta/instructions.md",
		"--secret", filepath.Join(local, "token")+":.rascal-secrets/token",
		"--", "sh", "-c", script)
	if r.code != 5 {
		t.Fatalf("run: exit %d, want the command's 5; stderr %q", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "do it") || !strings.Contains(r.stderr, "oops") {
		t.Fatalf("run output not shown live: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if got := names(t, out); got != "meta.json ocsf.ndjson runner.log" {
		t.Fatalf("run dir holds %q", got)
	}
	if log, _ := os.ReadFile(filepath.Join(out, "runner.log")); !strings.Contains(string(log), "do it") {
		t.Fatalf("runner.log: %q", log)
	}
	if strings.Contains(r.stdout+r.stderr, "tok-never-shown") {
		t.Fatal("the secret was printed")
	}
	// --delete removed the sandbox.
	wantFailure(t, runFerry(t, nil, "sandbox", "get", "fresh"), "not found")
	wantUsage(t, runFerry(t, nil, "run", "box", "--in", "nocolon", "--", "true"), "LOCAL:REMOTE")
}

func names(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// TestCpSSH copies both ways over direct SSH: POSIX mode needs nothing of
// the transport but exec. With SSH the sandbox name is only a label, and
// relative paths are under the login user's home.
func TestCpSSH(t *testing.T) {
	isolate(t)
	s := sshdtest.Start(t)
	ssh := []string{"--ssh", s.User + "@" + s.Addr, "--ssh-identity", s.IdentityFile, "--ssh-known-hosts", s.KnownHosts}
	local := t.TempDir()
	writeFile(t, filepath.Join(local, "src", "a.txt"), []byte("over ssh"), 0o644)
	remote := filepath.Join(t.TempDir(), "remote")
	wantOK(t, runFerry(t, nil, append(ssh, "-q", "cp", filepath.Join(local, "src"), "node:"+remote)...))
	if b, err := os.ReadFile(filepath.Join(remote, "a.txt")); err != nil || string(b) != "over ssh" {
		t.Fatalf("uploaded over ssh: %q %v", b, err)
	}
	back := filepath.Join(t.TempDir(), "back")
	wantOK(t, runFerry(t, nil, append(ssh, "-q", "cp", "node:"+remote, back)...))
	if b, err := os.ReadFile(filepath.Join(back, "a.txt")); err != nil || string(b) != "over ssh" {
		t.Fatalf("downloaded over ssh: %q %v", b, err)
	}
}

func TestSessionKeyCLI(t *testing.T) {
	r := runFerry(t, nil, "session", "key", "rtzll/rascal", "42")
	wantOK(t, r)
	if !strings.HasPrefix(r.stdout, "rtzll-rascal-42-") || len(r.stdout) != len("rtzll-rascal-42-")+10+1 {
		t.Fatalf("session key: %q", r.stdout)
	}
	wantUsage(t, runFerry(t, nil, "session", "key", "only-one"), "takes 2 argument")
}

func TestRemotePath(t *testing.T) {
	for _, tc := range []struct {
		arg, box, path string
		remote         bool
	}{
		{"box:work/src", "box", "work/src", true},
		{"box:", "box", ".", true},
		{"box:/abs", "box", "/abs", true},
		{"./a:b", "", "", false},
		{"dir/a:b", "", "", false},
		{":x", "", "", false},
		{"plain", "", "", false},
		{"/abs:x", "", "", false},
	} {
		box, p, ok := remotePath(tc.arg)
		if ok != tc.remote || box != tc.box || p != tc.path {
			t.Errorf("remotePath(%q) = %q, %q, %v; want %q, %q, %v", tc.arg, box, p, ok, tc.box, tc.path, tc.remote)
		}
	}
}

// TestPullFollowCLI runs `ferry pull --follow` while the sandbox's
// agent.ndjson grows, then interrupts it as SIGINT would (main cancels the
// context): the local copy is whole and each new line was printed once.
func TestPullFollowCLI(t *testing.T) {
	g := activeGateway(t)
	wantOK(t, runFerry(t, nil, "sandbox", "create", "box", "-q"))
	meta := filepath.Join(g.Root, "box", "rascal-meta")
	writeFile(t, filepath.Join(meta, "agent.ndjson"), []byte("{\"n\":0}\n"), 0o644)
	writeFile(t, filepath.Join(meta, "runner.log"), []byte("queued\n"), 0o644)
	out := filepath.Join(t.TempDir(), "out")

	ctx, cancel := context.WithTimeout(context.Background(), runWait)
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"pull", "box", "--out", out, "--follow"}, strings.NewReader(""), &stdout, &stderr)
	}()
	// Lines written after the first pull are the new ones.
	for i := 0; i < 1000 && !strings.Contains(stderr.String(), "following"); i++ {
		time.Sleep(5 * time.Millisecond)
	}

	var want strings.Builder
	f, err := os.OpenFile(filepath.Join(meta, "agent.ndjson"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 200; i++ {
		line := fmt.Sprintf("{\"n\":%d}\n", i)
		want.WriteString(line)
		if _, err := f.WriteString(line); err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	f.Close()
	for i := 0; i < 500 && stdout.String() != want.String(); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("pull --follow: exit %d: %s", code, stderr.String())
	}
	if stdout.String() != want.String() {
		t.Fatalf("printed %q, want the 200 new lines once each", stdout.String())
	}
	got, _ := os.ReadFile(filepath.Join(out, "agent.ndjson"))
	if string(got) != "{\"n\":0}\n"+want.String() {
		t.Fatalf("local agent.ndjson: %d bytes, want %d", len(got), len("{\"n\":0}\n")+want.Len())
	}
}

// TestCompressCLI: --compress zstd shrinks compressible data on the wire,
// --compress none does not, and a bad value is a usage error.
func TestCompressCLI(t *testing.T) {
	activeGateway(t)
	wantOK(t, runFerry(t, nil, "sandbox", "create", "box", "-q"))
	local := t.TempDir()
	writeFile(t, filepath.Join(local, "src", "log.ndjson"), []byte(strings.Repeat(`{"type":"assistant","text":"the same words again"}`+"\n", 20000)), 0o644)
	wire := map[string]float64{}
	for _, c := range []string{"zstd", "none"} {
		r := runFerry(t, nil, "--json", "--compress", c, "cp", filepath.Join(local, "src"), "box:"+c)
		if r.code != 0 {
			t.Fatalf("cp --compress %s: exit %d: %s", c, r.code, r.stderr)
		}
		var st map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st["mode"] != "agent" {
			t.Fatalf("cp --json: %q %v", r.stdout, err)
		}
		wire[c] = st["wire_bytes"].(float64) / st["bytes"].(float64)
	}
	if wire["zstd"] > 0.1 || wire["none"] < 1 {
		t.Fatalf("wire/bytes: %v; want zstd well under 0.1 and none at least 1", wire)
	}
	wantUsage(t, runFerry(t, nil, "--compress", "lz4", "cp", local, "box:x"), "compress")
	wantUsage(t, runFerry(t, nil, "--mode", "magic", "cp", local, "box:x"), "mode")
}
