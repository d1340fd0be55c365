package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-dev/ferry/relay"
)

func newExecCmd(g *globals, s streams) *cobra.Command {
	var (
		workdir string
		env     []string
		timeout time.Duration
		tty     bool
	)
	cmd := &cobra.Command{
		Use:   "exec SANDBOX [flags] -- CMD [ARG...]",
		Short: "Run a command in a sandbox, streaming stdin, stdout and stderr",
		Long: `Run a command in a sandbox. Standard input, output and error are streamed
as they are (no terminal), and ferry exits with the command's exit code.
Standard input is read only as the command consumes it.

With -t (--tty) the command runs on a terminal in the sandbox instead, as
with ` + "`docker exec -it`" + `: its output and errors both come out on standard
output, with the terminal's line endings. When standard input is a
terminal it is put in raw mode for the run, so that every key, Ctrl-C and
Ctrl-D included, goes to the sandbox; the sandbox's terminal takes this
one's size and follows its resizes; and the terminal is restored however
ferry ends. When standard input is not a terminal it is left as it is.

Arguments reach the command exactly, each as one word. Relative --workdir
paths are relative to the sandbox's workspace root.`,
		Example: `  ferry exec box -- ls -la
  tar -c src | ferry exec box --workdir work -- tar -x
  ferry exec box --env MODE=fast --timeout 10m -- make test
  ferry exec -t box -- bash`,
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
			if tty {
				lt, stop, err := startTerminal(cmd.Context(), s.in, s.out)
				if err != nil {
					return fmt.Errorf("set up the terminal: %w", err)
				}
				// Deferred, so that every way out puts the terminal back.
				defer stop()
				c.TTY, c.Size, c.Resize = true, lt.size, lt.resize
			}
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
	f.BoolVarP(&tty, "tty", "t", false, "run the command on a terminal, stdin raw when it is one (docker exec -it)")
	return cmd
}
