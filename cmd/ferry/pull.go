package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/transfer"
)

// exitNoMeta is `ferry pull`'s exit code when meta.json is absent: the
// orchestrator's signal that the run left no result.
const exitNoMeta = 3

func newPullCmd(g *globals, s streams) *cobra.Command {
	var out, metaDir string
	var followLive bool
	cmd := &cobra.Command{
		Use:   "pull SANDBOX [--out DIR] [--follow]",
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
agent (not --mode posix).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				out = args[0]
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
			res, err := ferry.Pull(cmd.Context(), sb, metaDir, out, transfer.Limits{})
			noMeta := errors.Is(err, ferry.ErrNoMeta)
			if err != nil && !noMeta {
				return err
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
				if e := json.NewEncoder(s.out).Encode(res); e != nil {
					return e
				}
			case !g.quiet:
				fmt.Fprintf(s.err, "saved to %s: %s\n", out, strings.Join(res.Saved, ", "))
				if len(res.Missing) > 0 {
					fmt.Fprintf(s.err, "absent: %s\n", strings.Join(res.Missing, ", "))
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
	return cmd
}
