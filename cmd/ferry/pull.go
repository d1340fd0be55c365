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
	cmd := &cobra.Command{
		Use:   "pull SANDBOX [--out DIR]",
		Short: "Fetch a run's artifacts (meta.json, agent.ndjson, ...) from a sandbox",
		Long: `Fetch the artifacts a Rascal run leaves in the sandbox's rascal-meta/
directory (` + strings.Join(ferry.Artifacts, ", ") + `)
into DIR (default ./SANDBOX), each file replaced atomically. Absent files
other than meta.json are listed, not errors; without meta.json ferry saves
the rest and exits 3.`,
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
			res, err := ferry.Pull(cmd.Context(), ferry.Sandbox{X: x, Name: args[0]}, metaDir, out, transfer.Limits{})
			noMeta := errors.Is(err, ferry.ErrNoMeta)
			if err != nil && !noMeta {
				return err
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
	return cmd
}
