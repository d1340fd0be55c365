package agent

import (
	"context"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
)

// Probe is what the agent reports about its sandbox. The agent is not
// trusted: these are its claims.
type Probe struct {
	OS, Arch string
	UID, GID uint32
	// Workspace is the directory relative paths start from.
	Workspace string
	// FreeBytes is what the workspace's file system has free.
	FreeBytes uint64
	TempDir   string
	// Version is the agent's release string.
	Version string
}

// Probe asks the agent to describe its sandbox.
func (c *Client) Probe(ctx context.Context) (Probe, error) {
	r, err := c.rpc.Probe(ctx, &agentv1.ProbeRequest{})
	if err != nil {
		return Probe{}, c.wrap("probe", err)
	}
	return Probe{
		OS: r.GetOs(), Arch: r.GetArch(), UID: r.GetUid(), GID: r.GetGid(), Workspace: r.GetWorkspace(),
		FreeBytes: r.GetFreeBytes(), TempDir: r.GetTempDir(), Version: r.GetVersion(),
	}, nil
}
