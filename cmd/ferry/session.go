package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ferry-dev/ferry/session"
)

func newSessionCmd(g *globals, s streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Agents' session directories across runs",
		Args:  exactArgs(0),
		RunE:  func(*cobra.Command, []string) error { return usagef("session needs a subcommand: key") },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "key REPO TASK_ID",
		Short: "Print the session key Rascal uses for a task",
		Long: `Print TaskSessionKey(REPO, TASK_ID) exactly as Rascal computes it: the
lowercased "REPO-TASK_ID" with every run of other characters than a-z and
0-9 made one "-", cut to 45 bytes, then "-" and the first 10 hex digits of
sha256("REPO::TASK_ID"), both inputs trimmed of spaces.`,
		Example: `  ferry session key rtzll/rascal 42`,
		Args:    exactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			key := session.TaskKey(args[0], args[1])
			if g.json {
				return json.NewEncoder(s.out).Encode(map[string]string{"key": key})
			}
			_, err := fmt.Fprintln(s.out, key)
			return err
		},
	})
	return cmd
}
