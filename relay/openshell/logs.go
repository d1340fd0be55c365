package openshell

import (
	"context"
	"time"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
)

// LogLine is one of the gateway's log records for a sandbox.
type LogLine struct {
	Time    time.Time
	Level   string // "INFO", "WARN", ...; may be empty
	Source  string // "gateway", "sandbox", ...; empty is upstream's "gateway"
	Target  string // the emitter: "ocsf" for upstream's OCSF events
	Message string
	Fields  map[string]string
}

// SandboxLogs returns the gateway's log records for the sandbox called
// name, oldest first: GetSandbox for its id, then GetSandboxLogs with the
// gateway's defaults (its newest 2000 records, every source and level).
// The sandbox need not be READY. What the records hold is the gateway's
// choice; ferry's embedded gateway logs each exec's argv, workdir,
// environment keys, exit code and byte counts, never stdin or environment
// values.
func (c *Client) SandboxLogs(ctx context.Context, name string) ([]LogLine, error) {
	sb, err := c.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	resp, err := c.api.GetSandboxLogs(ctx, &openshellv1.GetSandboxLogsRequest{
		SandboxId: sb.ID,
		Workspace: c.cfg.Workspace,
	})
	if err != nil {
		return nil, c.lifecycleError("get logs of sandbox "+name, err)
	}
	out := make([]LogLine, 0, len(resp.GetLogs()))
	for _, l := range resp.GetLogs() {
		out = append(out, LogLine{Time: time.UnixMilli(l.GetTimestampMs()), Level: l.GetLevel(), Source: l.GetSource(), Target: l.GetTarget(), Message: l.GetMessage(), Fields: l.GetFields()})
	}
	return out, nil
}
