package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/openshell"
)

func newRunCmd(g *globals, s streams) *cobra.Command {
	var (
		ins, secrets, env []string
		sessions, diffs   []string
		df                diffFlags
		out, create, wd   string
		metaDir           string
		del, followLive   bool
		timeout, idle     time.Duration
		sf                specFlags
	)
	cmd := &cobra.Command{
		Use:   "run SANDBOX [flags] -- CMD [ARG...]",
		Short: "One Option-B run: upload inputs, run a command, pull the artifacts",
		Long: `Upload the --in files, run the command in the sandbox (its output shown
live and appended to DIR/runner.log), then pull the artifacts into DIR
(default ./SANDBOX) always: also after a failure, a timeout or Ctrl-C.
ferry exits with the command's exit code.

--secret LOCAL:REMOTE files travel only through the exec stream's stdin and
land with mode 0600 in a 0700 directory; they never appear in an argv, an
environment or a log. --create creates the sandbox first and waits until
it is ready (a sandbox of that name already there is used as it is);
--policy, --provider, --label and --sandbox-env say what it is created
from, as for ferry sandbox create. --delete removes it at the end whatever
happened. -e sets the command's environment, not the sandbox's.

--diff REMOTE_DIR lists the directory before the command and after it (in
agent mode next to the data, moving no file content) and writes what was
created, deleted and modified to DIR/workspace-diff.json, one section a
directory, with a one-line summary each; --diff-include/--diff-exclude
limit it to globs, --diff-content adds unified diffs of text files of up to
--diff-content-max bytes (their content is read before the command). See
ferry diff.

--session KEY:REMOTE restores the task's session snapshot KEY from the
session store (--store) into REMOTE before the command (nothing on a
task's first run) and saves REMOTE as a new snapshot after it, also after a
failure or a timeout. A relay lost once that snapshot is committed does not
change ferry's exit code: it says "committed snapshot N of KEY, then lost the
relay", and --json has relay_lost in the session's "saved".

Through a gateway, the sandbox's OCSF security events since the run
started (network connections allowed and denied, processes launched and
ended, findings) are read from its log after the command into
DIR/ocsf.ndjson, one event a line, and summed up on one line ("events:
network 12 (3 denied), process 40, findings 0"; --json: "events"). When
the log cannot be read (--ssh has none) ferry says "events unavailable"
and why, never "no events".

In agent mode the agent's agent.ndjson is shown live as it grows, a line at
a time, on stdout with the command's own output (--follow=false: not).

The transfers before and after the command (not the command itself, which
may be silent for long) fail when next to nothing (under 64 bytes a second)
has moved, either way, for --idle-timeout; a session save waiting for a
prune of the store is not idle.`,
		Example: `  ferry run box --in ./run/instructions.md:rascal-meta/instructions.md \
      --secret ./secrets/gh_token:.rascal-secrets/gh_token --out ./run -- ./agent.sh`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 || cmd.ArgsLenAtDash() != 1 {
				return usagef("run needs a sandbox, --, and a command: ferry run SANDBOX [flags] -- CMD [ARG...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			idleTimeout, err := idleTimeout(idle)
			if err != nil {
				return err
			}
			// The command's output and the followed lines share stdout.
			stdout := &lockedWriter{w: s.out}
			spec := ferry.RunSpec{Argv: args[1:], Workdir: wd, Timeout: timeout, Out: out, MetaDir: metaDir, Stdout: stdout, Stderr: s.err}
			if followLive && !g.json && !g.quiet {
				spec.Lines = stdout
			}
			if spec.Out == "" {
				spec.Out = name
			}
			if spec.Env, err = splitEnv(env); err != nil {
				return err
			}
			if spec.Inputs, err = mappings("--in", ins); err != nil {
				return err
			}
			if spec.Secrets, err = mappings("--secret", secrets); err != nil {
				return err
			}
			for _, v := range sessions {
				k, r, ok := strings.Cut(v, ":")
				if !ok || k == "" || r == "" {
					return usagef("--session %q: want KEY:REMOTE", v)
				}
				spec.Sessions = append(spec.Sessions, ferry.SessionMapping{Key: k, Remote: r})
			}
			if spec.Diff, spec.DiffFilter, spec.DiffContent, err = df.run(diffs); err != nil {
				return err
			}
			if err := (&relay.Command{Argv: spec.Argv, Env: spec.Env, Workdir: wd}).Validate(); err != nil {
				return usageError{err}
			}
			if sf.set() && create == "" {
				return usagef("--policy, --provider, --label and --sandbox-env need --create")
			}
			var createSpec openshell.Spec
			if create != "" {
				image := create
				if image == "default" {
					image = ""
				}
				if createSpec, err = sf.spec(name, image); err != nil {
					return err
				}
			}
			// Every usage check comes before the sandbox is touched: a
			// mistake in the call creates nothing and deletes nothing.
			sb, err := g.sandbox(nil, name)
			if err != nil {
				return err
			}
			sb.IdleTimeout = idleTimeout
			// The store before the gateway: a store that is not there
			// fails the run before a sandbox is created.
			if len(spec.Sessions) > 0 {
				if spec.Store, err = g.openStore(cmd.Context()); err != nil {
					return err
				}
			}
			// Through a gateway, its log gives the run's OCSF events;
			// --ssh has none, and the result says so.
			var gw *openshell.Client
			if create != "" || del || g.ssh == "" {
				c, err := g.client()
				if err != nil {
					return err
				}
				defer c.Close()
				gw = c
				spec.Logs = c
				if del {
					// Registered before the create, so that a create
					// interrupted while it waits for the sandbox (Ctrl-C,
					// a failure to become ready) does not leave it behind;
					// from here every exit path returns through it.
					defer deleteSandbox(cmd.Context(), c, name, s.err)
				}
				if create != "" {
					// Ensure, not Create: a retried run finds the sandbox
					// its first attempt made.
					if _, err := c.Ensure(cmd.Context(), createSpec); err != nil {
						return err
					}
				}
			}
			// The commands go through the log's client when there is
			// one: one connection to the gateway, one lookup of the
			// sandbox.
			var x relay.Execer
			var closeFn func()
			if gw != nil && g.ssh == "" {
				x, closeFn = g.execerOn(gw)
			} else if x, closeFn, err = g.execer(); err != nil {
				return err
			}
			defer closeFn()
			sb.X = x
			res, err := ferry.Run(cmd.Context(), sb, spec)
			if g.json {
				if e := json.NewEncoder(s.out).Encode(res); e != nil {
					return e
				}
			}
			if res.PullErr != nil {
				fmt.Fprintf(s.err, "ferry: %s\n", oneLine(res.PullErr))
			} else if !g.quiet && !g.json {
				fmt.Fprintf(s.err, "ferry: artifacts in %s: %s\n", spec.Out, strings.Join(res.Pull.Saved, ", "))
			}
			if ev := res.Events; ev != nil && !g.json {
				switch {
				case ev.State != ferry.EventsObserved:
					fmt.Fprintf(s.err, "ferry: %s\n", oneLine(errors.New(ev.Summary)))
				case !g.quiet:
					fmt.Fprintf(s.err, "ferry: events: %s (%s)\n", ev.Summary, ev.Path)
				}
			}
			// A relay lost once the pull and the saves were done fails
			// neither: say it once, on the sessions' lines if any.
			lostShown := false
			for _, rs := range res.Sessions {
				switch {
				case rs.Error != "":
					fmt.Fprintf(s.err, "ferry: session %s: %s\n", rs.Key, oneLine(errors.New(rs.Error)))
				case rs.Saved != nil && rs.Saved.RelayLost != "":
					fmt.Fprintf(s.err, "ferry: committed snapshot %d of %s, then lost the relay: %s\n",
						rs.Saved.Snapshot, rs.Key, oneLine(errors.New(rs.Saved.RelayLost)))
					lostShown = true
				case g.quiet || g.json:
				case rs.Saved != nil:
					resumed := "first run"
					if rs.Restored != nil && !rs.Restored.Missing {
						resumed = fmt.Sprintf("resumed snapshot %d", rs.Restored.Snapshot)
					}
					fmt.Fprintf(s.err, "ferry: session %s: %s; saved snapshot %d: %d files, %d bytes, %d new, %d bytes over the relay\n",
						rs.Key, resumed, rs.Saved.Snapshot, rs.Saved.Files, rs.Saved.Bytes, rs.Saved.NewBytes, rs.Saved.WireBytes)
				}
			}
			runDiffLines(s.err, res.Diff, g.quiet || g.json)
			if res.Pull.RelayLost != "" && !lostShown {
				fmt.Fprintf(s.err, "ferry: pulled the artifacts into %s, then lost the relay: %s\n", spec.Out, oneLine(errors.New(res.Pull.RelayLost)))
			}
			if err != nil {
				if cmd.Context().Err() != nil {
					return exitCode(130)
				}
				return err
			}
			if res.ExitCode != 0 {
				return exitCode(res.ExitCode)
			}
			if errors.Is(res.PullErr, ferry.ErrNoMeta) {
				return exitCode(exitNoMeta)
			}
			if res.PullErr != nil || res.SessionErr != nil || res.DiffErr != nil {
				return exitCode(1)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&ins, "in", nil, "upload LOCAL:REMOTE before the command (repeatable)")
	f.StringArrayVar(&secrets, "secret", nil, "upload a secret file LOCAL:REMOTE, 0600 in a 0700 directory (repeatable)")
	f.StringVarP(&out, "out", "o", "", "local run directory for artifacts and runner.log (default ./SANDBOX)")
	f.StringVar(&metaDir, "meta-dir", ferry.DefaultMetaDir, "the sandbox directory holding the artifacts")
	f.StringVar(&create, "create", "", "create the sandbox from IMAGE first (\"default\": the gateway's image)")
	f.BoolVar(&del, "delete", false, "delete the sandbox at the end, whatever happened")
	f.StringArrayVarP(&env, "env", "e", nil, "set an environment variable KEY=VALUE (repeatable; never put secrets here)")
	f.StringVarP(&wd, "workdir", "w", "", "directory to run in (relative to the workspace root)")
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long and exit 124 (0: no limit)")
	f.StringArrayVar(&sessions, "session", nil, "restore session KEY into REMOTE before the command and save it after (KEY:REMOTE, repeatable)")
	f.BoolVarP(&followLive, "follow", "f", true, "show agent.ndjson's lines live as they are written (agent mode)")
	f.StringArrayVar(&diffs, "diff", nil, "list REMOTE_DIR before and after the command and write their diff to DIR/workspace-diff.json (repeatable)")
	df.add(f, "diff-")
	sf.add(f, "sandbox-env", "")
	addIdleFlag(cmd, &idle)
	return cmd
}

// deleteSandbox is --delete: it runs after a cancelled ctx too (Ctrl-C),
// under a deadline of its own.
func deleteSandbox(ctx context.Context, c *openshell.Client, name string, errw io.Writer) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := c.Delete(dctx, name); err != nil && !errors.Is(err, relay.ErrNotFound) {
		fmt.Fprintf(errw, "ferry: %s\n", oneLine(err))
	}
}

func mappings(flag string, vals []string) ([]ferry.Mapping, error) {
	var out []ferry.Mapping
	for _, v := range vals {
		l, r, ok := strings.Cut(v, ":")
		if !ok || l == "" || r == "" {
			return nil, usagef("%s %q: want LOCAL:REMOTE", flag, v)
		}
		out = append(out, ferry.Mapping{Local: l, Remote: r})
	}
	return out, nil
}

// lockedWriter serializes writes from the command's output and the follow.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
