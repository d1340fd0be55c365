package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/renameio/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/session/treediff"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// diffFlags are the flags `ferry run` and `ferry diff` share.
type diffFlags struct {
	include, exclude []string
	content          bool
	contentCap       int64
	prefix           string // of the flags' names
}

func (d *diffFlags) add(f *pflag.FlagSet, prefix string) {
	d.prefix = prefix
	f.StringArrayVar(&d.include, prefix+"include", nil, "limit the diff to paths matching this glob (** spans directories; repeatable)")
	f.StringArrayVar(&d.exclude, prefix+"exclude", nil, "leave paths matching this glob out of the diff, whatever --"+prefix+"include says (repeatable)")
	f.BoolVar(&d.content, prefix+"content", false, "add unified diffs of changed text files (their before content is read first)")
	f.Int64Var(&d.contentCap, prefix+"content-max", 64<<10, "the largest text file --"+prefix+"content diffs, in bytes")
}

func (d *diffFlags) filter() (treediff.Filter, error) {
	f := treediff.Filter{Include: d.include, Exclude: d.exclude}
	if err := f.Validate(); err != nil {
		return f, usageError{err}
	}
	return f, nil
}

// cap is the content cap the flags ask for: 0 without --content.
func (d *diffFlags) cap() (int64, error) {
	if !d.content {
		return 0, nil
	}
	if d.contentCap <= 0 {
		return 0, usagef("--%scontent-max %d: want a positive size", d.prefix, d.contentCap)
	}
	return d.contentCap, nil
}

func newDiffCmd(g *globals, s streams) *cobra.Command {
	var (
		since, save, out string
		idle             time.Duration
		df               diffFlags
	)
	cmd := &cobra.Command{
		Use:   "diff SANDBOX:DIR [--since MANIFEST] [--save MANIFEST]",
		Short: "List a sandbox directory, and diff it against a manifest saved earlier",
		Long: `List the sandbox directory DIR (each entry's path, type, mode, size,
content digest and symlink target) and, with --since, print how it differs
from the manifest in that file: created, deleted and modified paths, each
modification saying what changed (content, mode, type, target), with sizes
and digests, in path order, and totals. --save writes the new listing as a
manifest for a later --since (with --content it keeps the content of small
text files, which a later --content diff needs as its before). --out writes
the diff, as one section of workspace-diff.json, to a file.

In agent mode the agent hashes the files where they lie and no file content
crosses the relay; in POSIX mode the directory is downloaded to a private
temp directory and hashed here (--json's mode and moved_contents say so).
Both modes give the same digests, so a manifest saved in one mode diffs
against the other. A manifest is input like the sandbox's answers: names,
counts, sizes and digests are checked as a download checks them.

--include and --exclude limit the diff to paths matching doublestar globs
("src/**/*.go", ".git/**"); an excluded path is out whatever --include
says.`,
		Example: `  ferry diff box:work/repo --save before.json
  ferry diff box:work/repo --since before.json --exclude '.git/**' --json`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			box, dir, err := sessionTarget(args[0])
			if err != nil {
				return err
			}
			if since == "" && save == "" {
				return usagef("diff needs --since MANIFEST, --save MANIFEST, or both")
			}
			if out != "" && since == "" {
				return usagef("--out writes a diff, which needs --since")
			}
			filter, err := df.filter()
			if err != nil {
				return err
			}
			contentCap, err := df.cap()
			if err != nil {
				return err
			}
			idleTimeout, err := idleTimeout(idle)
			if err != nil {
				return err
			}
			var before *treediff.Manifest
			if since != "" {
				if before, err = readManifestFile(since); err != nil {
					return err
				}
			}
			x, closeFn, err := g.execer()
			if err != nil {
				return err
			}
			defer closeFn()
			sb, err := g.sandbox(x, box)
			if err != nil {
				return err
			}
			sb.IdleTimeout = idleTimeout
			o := treediff.Options{Since: before, ContentCap: contentCap}
			if save != "" && contentCap > 0 {
				// A manifest saved for a later --content keeps every
				// small text file, changed or not.
				o.Since = nil
			}
			after, err := ferry.Manifest(cmd.Context(), sb, dir, o)
			if err != nil {
				return err
			}
			if save != "" {
				if err := writeManifestFile(save, after); err != nil {
					return err
				}
			}
			if before == nil {
				if g.json {
					return json.NewEncoder(s.out).Encode(manifestSummary(after, save))
				}
				if !g.quiet {
					fmt.Fprintf(s.err, "ferry: saved the manifest of %s (%d entries, %s mode) to %s\n", args[0], len(after.Entries), after.Mode, save)
				}
				return nil
			}
			rep, err := ferry.Diff(before, after, filter)
			if err != nil {
				return err
			}
			if out != "" {
				doc := &treediff.Document{Format: treediff.Format, Sandbox: box, Dirs: []*treediff.Report{rep}}
				b, err := doc.MarshalIndent()
				if err == nil {
					err = renameio.WriteFile(out, b, 0o644)
				}
				if err != nil {
					return fmt.Errorf("write %s: %w", out, err)
				}
			}
			if g.json {
				return json.NewEncoder(s.out).Encode(rep)
			}
			if !g.quiet {
				printReport(s.out, rep)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&since, "since", "", "diff against the manifest in this file")
	f.StringVar(&save, "save", "", "write the directory's manifest to this file")
	f.StringVarP(&out, "out", "o", "", "also write the diff to this file, as workspace-diff.json holds it")
	df.add(f, "")
	addIdleFlag(cmd, &idle)
	return cmd
}

// manifestSummary is `ferry diff --save --json`'s output.
func manifestSummary(m *treediff.Manifest, file string) map[string]any {
	var files, bytes int64
	for _, e := range m.Entries {
		if e.Type == treediff.File {
			files++
			bytes += e.Size
		}
	}
	return map[string]any{
		"saved": file, "dir": m.Dir, "entries": len(m.Entries), "files": files, "bytes": bytes,
		"mode": m.Mode, "moved_contents": m.MovedContents, "wire_bytes": m.WireBytes,
	}
}

// readManifestFile reads a --since manifest; it is checked as a sandbox's
// answer is.
func readManifestFile(name string) (*treediff.Manifest, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	defer f.Close()
	m, err := treediff.ReadManifest(f, archive.Limits{})
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", name, err)
	}
	return m, nil
}

func writeManifestFile(name string, m *treediff.Manifest) error {
	pf, err := renameio.NewPendingFile(name, renameio.WithPermissions(0o644))
	if err != nil {
		return fmt.Errorf("write manifest %s: %w", name, err)
	}
	defer pf.Cleanup()
	if err := m.WriteJSON(pf); err != nil {
		return fmt.Errorf("write manifest %s: %w", name, err)
	}
	if err := pf.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("write manifest %s: %w", name, err)
	}
	return nil
}

// printReport is a diff for people: one line a change, then the totals.
func printReport(w io.Writer, r *treediff.Report) {
	for _, c := range r.Created {
		fmt.Fprintf(w, "+ %s\n", c.Path)
	}
	for _, c := range r.Deleted {
		fmt.Fprintf(w, "- %s\n", c.Path)
	}
	for _, c := range r.Modified {
		fmt.Fprintf(w, "~ %s (%s)\n", c.Path, strings.Join(c.Changed, ", "))
	}
	for _, list := range [][]*treediff.Change{r.Created, r.Modified, r.Deleted} {
		for _, c := range list {
			if c.Diff != "" {
				fmt.Fprint(w, c.Diff)
			}
		}
	}
	fmt.Fprintln(w, r.Summary())
}

// runDiffLines prints a run's diff summaries, one line a directory.
func runDiffLines(w io.Writer, diffs []ferry.RunDiff, quiet bool) {
	for _, d := range diffs {
		switch {
		case d.Error != "":
			fmt.Fprintf(w, "ferry: diff %s: %s\n", d.Dir, oneLine(errors.New(d.Error)))
		case !quiet:
			fmt.Fprintf(w, "ferry: diff %s\n", d.Summary)
		}
	}
}

// run is the RunSpec fields of `ferry run --diff`.
func (d *diffFlags) run(dirs []string) ([]string, treediff.Filter, int64, error) {
	f, err := d.filter()
	if err != nil {
		return nil, f, 0, err
	}
	c, err := d.cap()
	if err != nil {
		return nil, f, 0, err
	}
	if len(dirs) == 0 && (len(d.include) > 0 || len(d.exclude) > 0 || d.content) {
		return nil, f, 0, usagef("--diff-include, --diff-exclude and --diff-content need --diff")
	}
	for _, dir := range dirs {
		if dir == "" {
			return nil, f, 0, usagef("--diff needs a directory")
		}
	}
	return dirs, f, c, nil
}
