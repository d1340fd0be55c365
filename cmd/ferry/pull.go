package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/openshell"
)

// exitNoMeta is `ferry pull`'s exit code when meta.json is absent: the
// orchestrator's signal that the run left no result.
const exitNoMeta = 3

func newPullCmd(g *globals, s streams) *cobra.Command {
	var out, metaDir string
	var followLive, audit bool
	var idle time.Duration
	cmd := &cobra.Command{
		Use:   "pull SANDBOX [--out DIR] [--follow] [--audit]",
		Short: "Fetch a run's artifacts (meta.json, agent.ndjson, ...) from a sandbox",
		Long: `Fetch the artifacts a Rascal run leaves in the sandbox's rascal-meta/
directory (` + strings.Join(ferry.Artifacts, ", ") + `)
into DIR (default ./SANDBOX), each file replaced atomically. Absent files
other than meta.json are listed, not errors; without meta.json ferry saves
the rest and exits 3.

With --follow, ferry then keeps the local agent.ndjson and runner.log
growing as the sandbox's grow, printing each new agent.ndjson line on
stdout, until interrupted (SIGINT, SIGTERM); a dropped relay is redialled
and the follow resumes where the local files end. Following needs the
agent (not --mode posix).

With --audit, ferry also writes the gateway's log of the sandbox
(GetSandboxLogs) to DIR/` + ferry.AuditFile + ` (mode 0600), one line per
record: time, level, source, message, then key=value fields. The embedded
gateway logs each exec's argv, workdir, environment keys, exit code and
byte counts; never stdin or environment values, which is where ferry keeps
secrets. The log is written after the artifacts (so it lists the pull's
own execs), before any --follow; it needs a gateway, not --ssh.

A pull through which next to nothing (under 64 bytes a second) has moved,
either way, for --idle-timeout fails; --follow, which waits for the run, is not subject to it.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if audit && g.ssh != "" {
				return usagef("--audit reads the gateway's sandbox log; --ssh reaches no gateway")
			}
			if out == "" {
				out = args[0]
			}
			idleTimeout, err := idleTimeout(idle)
			if err != nil {
				return err
			}
			x, closeFn, err := g.execer()
			if err != nil {
				return err
			}
			defer closeFn()
			sb, err := g.sandbox(x, args[0])
			if err != nil {
				return err
			}
			sb.IdleTimeout = idleTimeout
			res, err := ferry.Pull(cmd.Context(), sb, ferry.PullSpec{MetaDir: metaDir, Out: out})
			noMeta := errors.Is(err, ferry.ErrNoMeta)
			if err != nil && !noMeta {
				return err
			}
			var auditRes *ferry.AuditResult
			if audit {
				ar, err := pullAudit(cmd.Context(), g, x, args[0], out)
				if err != nil {
					return err
				}
				auditRes = &ar
			}
			if followLive {
				// The run may not have written meta.json yet: follow
				// anyway, and end like a plain pull when interrupted.
				lines := s.out
				if g.json || g.quiet {
					lines = nil
				}
				if !g.quiet && !g.json {
					fmt.Fprintf(s.err, "following %s:%s (Ctrl-C to stop)\n", args[0], metaDir)
				}
				if err := ferry.Follow(cmd.Context(), sb, ferry.FollowSpec{MetaDir: metaDir, Out: out, Lines: lines}); err != nil {
					return err
				}
				return nil
			}
			switch {
			case g.json:
				if e := json.NewEncoder(s.out).Encode(pullJSON{PullResult: res, AuditResult: auditRes}); e != nil {
					return e
				}
			case !g.quiet:
				fmt.Fprintf(s.err, "saved to %s: %s\n", out, strings.Join(res.Saved, ", "))
				if len(res.Missing) > 0 {
					fmt.Fprintf(s.err, "absent: %s\n", strings.Join(res.Missing, ", "))
				}
				if auditRes != nil {
					fmt.Fprintf(s.err, "audit log: %s (%d records)\n", auditRes.Path, auditRes.Lines)
				}
			}
			if noMeta {
				fmt.Fprintf(s.err, "ferry: %v\n", err)
				return exitCode(exitNoMeta)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "local directory for the artifacts (default ./SANDBOX)")
	cmd.Flags().StringVar(&metaDir, "meta-dir", ferry.DefaultMetaDir, "the sandbox directory holding the artifacts")
	cmd.Flags().BoolVarP(&followLive, "follow", "f", false, "then follow agent.ndjson and runner.log as they grow, printing new agent.ndjson lines")
	cmd.Flags().BoolVar(&audit, "audit", false, "also write the gateway's log of the sandbox to DIR/"+ferry.AuditFile)
	addIdleFlag(cmd, &idle)
	return cmd
}

// pullAudit writes the audit log through x when x is the gateway client,
// else (--transport ssh) through a client of its own.
func pullAudit(ctx context.Context, g *globals, x relay.Execer, sandbox, out string) (ferry.AuditResult, error) {
	if src, ok := x.(ferry.LogSource); ok {
		return ferry.PullAudit(ctx, src, sandbox, out)
	}
	var res ferry.AuditResult
	err := g.withClient(func(c *openshell.Client) error {
		var err error
		res, err = ferry.PullAudit(ctx, c, sandbox, out)
		return err
	})
	return res, err
}

// pullJSON is `ferry pull --json`'s object: the pull's result, and with
// --audit where the audit log went ("audit") and its records
// ("audit_lines"). A nil AuditResult leaves both out.
type pullJSON struct {
	ferry.PullResult
	*ferry.AuditResult
}
