package hostile

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
)

// ScenarioPath is where the agent at exe reads its scenario: a dot file
// beside it.
func ScenarioPath(exe string) string {
	return filepath.Join(filepath.Dir(exe), "."+filepath.Base(exe)+".scenario.json")
}

var (
	buildOnce sync.Once
	built     []byte
	buildErr  error
)

// binary builds the hostile agent for this machine, once per process.
func binary() ([]byte, error) {
	buildOnce.Do(func() {
		var out []byte
		built, out, buildErr = agenttest.GoBuild("./transfer/agent/agenttest/hostile/cmd/hostile-agent", runtime.GOARCH)
		if buildErr != nil {
			buildErr = fmt.Errorf("build hostile agent: %w\n%s", buildErr, out)
		}
	})
	return built, buildErr
}

// Plant puts the hostile agent where the serve script looks for ferry's
// cached build of b in a sandbox whose TMPDIR is tmp, claiming to be that
// build, with scenario s (its Digest is filled in). It returns the path of
// the scenario, which a test may rewrite between runs with Rewrite.
func Plant(t testing.TB, tmp string, b agent.Bundle, s Scenario) string {
	t.Helper()
	bin, ok := b[runtime.GOARCH]
	if !ok {
		t.Fatalf("no agent build for %s in the bundle", runtime.GOARCH)
	}
	raw, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, fmt.Sprintf(".ferry-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, bin.CacheName())
	// A rename, so that an agent running from the old file is not
	// disturbed (ETXTBSY).
	if err := os.WriteFile(exe+".new", raw, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(exe+".new", exe); err != nil {
		t.Fatal(err)
	}
	s.Digest = hex.EncodeToString(bin.Digest[:])
	path := ScenarioPath(exe)
	Rewrite(t, path, s)
	return path
}

// Rewrite replaces the scenario at path (from Plant) with s; the next
// connection to the agent answers as s says.
func Rewrite(t testing.TB, path string, s Scenario) {
	t.Helper()
	if s.Digest == "" {
		old, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		s.Digest = old.Digest
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".new", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// servedPath is where the agent at a scenario's path marks each
// connection it serves.
func servedPath(scenario string) string { return scenario + ".served" }

// MarkServed records that the agent reading scenario serves a connection.
func MarkServed(scenario string) error { return appendFile(servedPath(scenario), "served\n") }

// Served returns how many connections the agent of scenario served since
// the last call, and starts the count again: a test that means to drive
// the hostile agent checks it did.
func Served(scenario string) (int, error) {
	b, err := os.ReadFile(servedPath(scenario))
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if err := os.Remove(servedPath(scenario)); err != nil {
		return 0, err
	}
	return strings.Count(string(b), "\n"), nil
}
