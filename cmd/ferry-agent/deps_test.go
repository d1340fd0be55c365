package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLean: the agent is built without the CLI, the gateway, the
// OpenShell client (the relay interface alone is in) and gRPC's tracing (which brings html/template), as
// the Makefile builds it: it is streamed into every fresh sandbox.
func TestLean(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", "grpcnotrace", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, banned := range []string{
		"github.com/spf13/cobra",
		"github.com/ferry-dev/ferry/relay/gateway",
		"github.com/ferry-dev/ferry/relay/openshell",
		"github.com/ferry-dev/ferry/relay/local",
		"github.com/ferry-dev/ferry/proto/openshell/v1",
		"github.com/ferry-dev/ferry/session",
		"golang.org/x/net/trace",
		"html/template",
	} {
		for _, d := range deps {
			if d == banned || strings.HasPrefix(d, banned+"/") {
				t.Errorf("the agent imports %s", d)
			}
		}
	}
}
