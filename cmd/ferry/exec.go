package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-dev/ferry/relay"
)

func newExecCmd(g *globals, s streams) *cobra.Command {
	var (
		workdir string
		env     []string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "exec SANDBOX [flags] -- CMD [ARG...]",
		Short: "Run a command in a sandbox, streaming stdin, stdout and stderr",
		Long: `Run a command in a sandbox. Standard input, output and error are streamed
as they are (no terminal), and ferry exits with the command's exit code.
Standard input is read only as the command consumes it.

Arguments reach the command exactly, each as one word. Relative --workdir
paths are relative to the sandbox's workspace root.`,
		Example: `  ferry exec box -- ls -la
  tar -c src | ferry exec box --workdir work -- tar -x
  ferry exec box --env MODE=fast --timeout 10m -- make test`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usagef("exec needs a sandbox and a command: ferry exec SANDBOX -- CMD [ARG...]")
			}
			if cmd.ArgsLenAtDash() != 1 {
				return usagef("exec: put -- between the sandbox and the command")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			envMap, err := splitEnv(env)
			if err != nil {
				return err
			}
			if timeout < 0 {
				return usagef("--timeout must not be negative")
			}
			c := &relay.Command{
				Sandbox: args[0],
				Argv:    args[1:],
				Workdir: workdir,
				Env:     envMap,
				Timeout: timeout,
				Stdin:   s.in,
				Stdout:  s.out,
				Stderr:  s.err,
			}
			if err := c.Validate(); err != nil {
				return usageError{err}
			}
			x, closeFn, err := g.execer()
			if err != nil {
				return err
			}
			defer closeFn()
			code, err := x.Exec(cmd.Context(), c)
			if err != nil {
				if cmd.Context().Err() != nil {
					return exitCode(130)
				}
				return err
			}
			if code != 0 {
				return exitCode(code)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&workdir, "workdir", "w", "", "directory to run in (relative to the workspace root)")
	f.StringArrayVarP(&env, "env", "e", nil, "set an environment variable KEY=VALUE (repeatable; never put secrets here)")
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long and exit 124 (0: no limit)")
	return cmd
}
