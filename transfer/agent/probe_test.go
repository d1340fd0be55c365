package agent_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
)

func TestProbeInProcess(t *testing.T) {
	ws := t.TempDir()
	c := agenttest.InProcess(t, agent.ServerConfig{Workspace: ws, Version: "test"})
	r, err := c.Probe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.GetArch() != runtime.GOARCH || r.GetWorkspace() != ws || r.GetVersion() != "test" || r.GetFreeBytes() == 0 {
		t.Fatalf("probe = %v", r)
	}
}
