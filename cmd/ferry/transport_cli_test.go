package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// TestTransportSSHCLI runs exec, cp both ways, pull, session save/restore
// and run with --transport ssh: SSH over the gateway's ForwardTcp
// relay. The gateway records every exec RPC it serves; over SSH it must
// serve none.
func TestTransportSSHCLI(t *testing.T) {
	for _, mode := range []string{"posix", "auto"} {
		t.Run(mode, func(t *testing.T) { testTransportSSHCLI(t, mode) })
	}
}

func testTransportSSHCLI(t *testing.T, mode string) {
	g := activeGateway(t)
	wantOK(t, runFerry(t, nil, "sandbox", "create", "box", "-q"))
	ssh := []string{"--transport", "ssh", "--mode", mode}

	r := runFerry(t, strings.NewReader("in"), append(ssh, "exec", "box", "--env", "K=v", "--", "sh", "-c", `cat; printf '[%s]' "$K" "$PWD"; echo err >&2; exit 7`)...)
	if want := "in[v][" + filepath.Join(g.Root, "box") + "]"; r.code != 7 || r.stdout != want || r.stderr != "err\n" {
		t.Fatalf("exec: exit %d, stdout %q, stderr %q; want 7, %q, \"err\\n\"", r.code, r.stdout, r.stderr, want)
	}

	local := t.TempDir()
	writeFile(t, filepath.Join(local, "src", "a.txt"), []byte("over the relay"), 0o640)
	writeFile(t, filepath.Join(local, "src", "sub", "b.txt"), []byte("BB"), 0o600)
	r = runFerry(t, nil, append(ssh, "--json", "cp", filepath.Join(local, "src"), "box:work/src")...)
	if r.code != 0 {
		t.Fatalf("cp up: exit %d: %s", r.code, r.stderr)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st["files"] != float64(2) || st["bytes"] != float64(16) {
		t.Fatalf("cp up --json: %q (%v)", r.stdout, err)
	}
	if b, err := os.ReadFile(filepath.Join(g.Root, "box", "work", "src", "a.txt")); err != nil || string(b) != "over the relay" {
		t.Fatalf("uploaded file: %q %v", b, err)
	}
	back := filepath.Join(t.TempDir(), "back")
	wantOK(t, runFerry(t, nil, append(ssh, "-q", "cp", "box:work/src", back)...))
	transfertest.EqualTrees(t, filepath.Join(local, "src"), back)

	meta := filepath.Join(g.Root, "box", "rascal-meta")
	writeFile(t, filepath.Join(meta, "meta.json"), []byte(`{"exit_code":0}`), 0o644)
	writeFile(t, filepath.Join(meta, "agent.ndjson"), []byte("{}\n"), 0o644)
	out := filepath.Join(t.TempDir(), "out")
	wantOK(t, runFerry(t, nil, append(ssh, "-q", "pull", "box", "--out", out)...))
	if got := names(t, out); got != "agent.ndjson meta.json" {
		t.Fatalf("pull saved %q", got)
	}

	t.Setenv("FERRY_STORE", t.TempDir())
	src := filepath.Join(g.Root, "box", "sess")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	transfertest.RandomTree(t, src, 11, transfertest.TreeOptions{Entries: 30})
	wantOK(t, runFerry(t, nil, append(ssh, "-q", "session", "save", "box:sess", "task-1")...))
	wantOK(t, runFerry(t, nil, append(ssh, "-q", "session", "restore", "task-1", "box:restored")...))
	transfertest.EqualTrees(t, src, filepath.Join(g.Root, "box", "restored"))

	// A whole run, in a sandbox it creates and deletes.
	out = filepath.Join(t.TempDir(), "run")
	r = runFerry(t, nil, append(ssh, "run", "fresh", "--create", "default", "--delete", "--out", out, "--",
		"sh", "-c", `echo ran; mkdir -p rascal-meta; echo '{"exit_code":3}' > rascal-meta/meta.json; exit 3`)...)
	if r.code != 3 || !strings.Contains(r.stdout, "ran") {
		t.Fatalf("run: exit %d, stdout %q, stderr %q; want 3 and the output", r.code, r.stdout, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(out, "meta.json")); err != nil || !strings.Contains(string(b), `"exit_code":3`) {
		t.Fatalf("run's meta.json: %q, %v", b, err)
	}
	wantFailure(t, runFerry(t, nil, "sandbox", "get", "fresh"), "not found")

	if seen := g.Seen.String(); strings.Contains(seen, "argv:") {
		t.Fatalf("--transport ssh ran exec RPCs:\n%s", seen)
	}
	// The same sandbox through the exec RPCs, as a control for the check
	// above.
	wantOK(t, runFerry(t, nil, "-q", "exec", "box", "--", "true"))
	if !strings.Contains(g.Seen.String(), "argv: true") {
		t.Fatal("the gateway recorded no exec request for --transport exec")
	}
}

func TestTransportUsage(t *testing.T) {
	isolate(t)
	wantUsage(t, runFerry(t, nil, "--transport", "grpc", "exec", "box", "--", "true"), `--transport "grpc": want exec or ssh`)
	wantUsage(t, runFerry(t, nil, "--transport", "grpc", "sandbox", "list"), `--transport "grpc": want exec or ssh`)
	wantUsage(t, runFerry(t, nil, "--transport", "ssh", "--ssh", "me@host", "exec", "box", "--", "true"), "--ssh is direct SSH already")
	wantUsage(t, runFerry(t, nil, "--transport", "ssh", "--ssh", "me@host", "cp", "box:a", t.TempDir()), "--ssh is direct SSH already")
}
