package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ferry-dev/ferry/transfer"

	"github.com/spf13/cobra"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// remotePath splits "SANDBOX:PATH". As in docker cp, an argument is remote
// when a colon comes before any slash; "./a:b" is a local path.
func remotePath(arg string) (sandbox, p string, ok bool) {
	i := strings.IndexByte(arg, ':')
	if i <= 0 || strings.Contains(arg[:i], "/") {
		return "", "", false
	}
	p = arg[i+1:]
	if p == "" {
		p = "."
	}
	return arg[:i], p, true
}

func newCpCmd(g *globals, s streams) *cobra.Command {
	var idle time.Duration
	cmd := &cobra.Command{
		Use:   "cp SRC... DST",
		Short: "Copy files into or out of a sandbox (one side is SANDBOX:PATH)",
		Long: `Copy files between this machine and a sandbox; exactly one side is
SANDBOX:PATH, and a PATH without a leading / is under the sandbox's
workspace root. The semantics are cp -r's and docker cp's:

  a directory into an existing directory lands as DST/basename;
  a directory to a path that does not exist creates it with the contents;
  SRC/. copies a directory's contents;
  a file to a path that does not exist is a rename;
  several sources need an existing directory.

Symlinks are copied as links, modes and mtimes are kept, owners are not.
What comes out of a sandbox is checked entry by entry and placed only after
the whole stream has been checked. A missing source, or a copy that moved
nothing, exits 1. A copy through which next to nothing (under 64 bytes a
second) has moved, either way, for --idle-timeout fails.`,
		Example: `  ferry cp ./src box:work/src
  ferry cp box:rascal-meta/meta.json .
  ferry cp ./a.txt ./b.txt box:inbox/`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usagef("cp needs at least one source and a destination")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			srcs, dst := args[:len(args)-1], args[len(args)-1]
			dbox, dpath, dRemote := remotePath(dst)
			var sbox string
			var rsrcs []string
			for _, a := range srcs {
				b, p, ok := remotePath(a)
				if ok == dRemote {
					return usagef("cp: exactly one side must be SANDBOX:PATH (%q and %q)", a, dst)
				}
				if ok {
					if sbox != "" && b != sbox {
						return usagef("cp: sources come from two sandboxes, %s and %s", sbox, b)
					}
					sbox = b
					rsrcs = append(rsrcs, p)
				}
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
			var total func() int64
			if dRemote {
				total = func() int64 { return localSize(srcs) }
			}
			prog := newProgress(s.err, g.quiet || g.json, total)
			x = prog.wrap(x)
			var st transfer.Stats
			if dRemote {
				sb, serr := g.sandbox(x, dbox)
				if serr != nil {
					return serr
				}
				sb.IdleTimeout = idleTimeout
				st, err = ferry.Upload(cmd.Context(), sb, srcs, dpath)
			} else {
				sb, serr := g.sandbox(x, sbox)
				if serr != nil {
					return serr
				}
				sb.IdleTimeout = idleTimeout
				st, err = ferry.Download(cmd.Context(), sb, rsrcs, dst, archive.Limits{})
			}
			prog.Close()
			if err != nil {
				return err
			}
			switch {
			case g.json:
				return json.NewEncoder(s.out).Encode(st)
			case !g.quiet:
				fmt.Fprintf(s.err, "copied %d files, %d dirs, %d symlinks, %s in %.1fs\n", st.Files, st.Dirs, st.Symlinks, humanBytes(st.Bytes), st.Seconds)
			}
			return nil
		},
	}
	addIdleFlag(cmd, &idle)
	return cmd
}

// addIdleFlag adds --idle-timeout to a transfer command.
func addIdleFlag(cmd *cobra.Command, d *time.Duration) {
	cmd.Flags().DurationVar(d, "idle-timeout", ferry.DefaultIdleTimeout, "fail when next to nothing has moved to or from the sandbox for `DUR` (0: never)")
}

// idleTimeout is the Sandbox.IdleTimeout for --idle-timeout d, where 0
// means never.
func idleTimeout(d time.Duration) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, usagef("--idle-timeout %v: want a positive duration, or 0 for none", d)
	case d == 0:
		return -1, nil
	}
	return d, nil
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
