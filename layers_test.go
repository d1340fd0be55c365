package ferry_test

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// layers are the project's top-level packages, lowest first. A package
// may import its own tree and any tree below it, never one above or
// beside: the data path reads in one direction, cmd → rascal → root →
// session → transfer → relay → proto. internal/ holds what tests share and
// imports nothing of the module.
var layers = []string{"internal", "proto", "relay", "transfer", "session", "", "rascal", "cmd"}

const module = "github.com/ferry-dev/ferry"

// layerOf is the rank of an import path of this module in layers, or -1
// for a path outside it.
func layerOf(t *testing.T, p string) int {
	if p != module && !strings.HasPrefix(p, module+"/") {
		return -1
	}
	top, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(p, module), "/"), "/")
	for i, l := range layers {
		if l == top {
			return i
		}
	}
	t.Fatalf("%s is in no layer: add its tree to layers", p)
	return -1
}

// TestImportsPointDown fails on an import that points up or sideways
// between the top-level packages, tests' imports included.
func TestImportsPointDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-f",
		`{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`,
		module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := fields[0]
		from := layerOf(t, pkg)
		for _, imp := range fields[1:] {
			to := layerOf(t, imp)
			if to < 0 {
				continue
			}
			checked++
			if to > from {
				t.Errorf("%s imports %s: %s is above %s", pkg, imp, layerName(to), layerName(from))
			}
		}
	}
	// The module's own imports are many; none seen is a broken listing.
	if checked < 50 {
		t.Fatalf("only %d imports within the module listed", checked)
	}
}

// TestOpenShellWireStopsInRelay fails when code outside relay/ (tests
// aside) imports OpenShell's wire types: relay/openshell speaks for them,
// in its own types (Spec, Info, LogLine).
func TestOpenShellWireStopsInRelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	wire := module + "/proto/openshell/"
	users := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := fields[0]
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, wire) {
				continue
			}
			users++
			if !strings.HasPrefix(pkg, module+"/relay/") && !strings.HasPrefix(pkg, module+"/proto/") {
				t.Errorf("%s imports %s: OpenShell's wire types stop in relay/", pkg, imp)
			}
		}
	}
	if users == 0 {
		t.Fatal("no package imports the OpenShell protos: a broken listing")
	}
}

// TestAgentSidesApart fails when one side of agent mode depends on the
// other: the host's client (transfer/agent) on the sandbox's server or the
// supervisor, or those (and the agent's main) on the client. What both
// share is transfer/agent/internal/wire.
func TestAgentSidesApart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := module + "/transfer/agent"
	sandbox := []string{client + "/server", client + "/supervisor", module + "/cmd/ferry-agent"}
	args := append([]string{"list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, client}, sandbox...)
	out, err := exec.CommandContext(ctx, "go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1+len(sandbox) {
		t.Fatalf("go list: %d packages, want %d", len(lines), 1+len(sandbox))
	}
	for _, line := range lines {
		fields := strings.Fields(line)
		pkg, deps := fields[0], fields[1:]
		for _, d := range deps {
			switch {
			case pkg == client && slices.Contains(sandbox[:2], d):
				t.Errorf("the host's client %s depends on the sandbox's %s", pkg, d)
			case pkg != client && d == client:
				t.Errorf("the sandbox's %s depends on the host's client %s", pkg, d)
			}
		}
		if !slices.Contains(deps, client+"/internal/wire") {
			t.Errorf("%s does not depend on %s/internal/wire: a broken listing?", pkg, client)
		}
	}
}

func layerName(i int) string {
	if layers[i] == "" {
		return "the root package"
	}
	return layers[i]
}
