package openshell

import (
	"context"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
)

// SandboxLogs returns the gateway's log records for the sandbox called
// name, oldest first: GetSandbox for its id, then GetSandboxLogs with the
// gateway's defaults (its newest 2000 records, every source and level).
// The sandbox need not be READY. What the records hold is the gateway's
// choice; ferry's embedded gateway logs each exec's argv, workdir,
// environment keys, exit code and byte counts, never stdin or environment
// values.
func (c *Client) SandboxLogs(ctx context.Context, name string) ([]*openshellv1.SandboxLogLine, error) {
	sb, err := c.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	resp, err := c.api.GetSandboxLogs(ctx, &openshellv1.GetSandboxLogsRequest{
		SandboxId: sb.GetMetadata().GetId(),
		Workspace: c.cfg.Workspace,
	})
	if err != nil {
		return nil, c.lifecycleError("get logs of sandbox "+name, err)
	}
	return resp.GetLogs(), nil
}
