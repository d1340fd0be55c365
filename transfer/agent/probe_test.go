package agent_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/agent/server"
)

func TestProbeInProcess(t *testing.T) {
	ws := t.TempDir()
	c := agenttest.InProcess(t, server.Config{Workspace: ws, Version: "test"})
	r, err := c.Probe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Arch != runtime.GOARCH || r.Workspace != ws || r.Version != "test" || r.FreeBytes == 0 {
		t.Fatalf("probe = %+v", r)
	}
}
