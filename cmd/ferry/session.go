package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/afero"
	"github.com/spf13/cobra"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/session/s3store"
	"github.com/ferry-dev/ferry/session/stores"
)

// openStore opens the session store: --store, else $FERRY_STORE, else
// session.DefaultLocation, composed by stores.Open (an S3 store in packs
// through the chunk cache in $FERRY_CACHE_DIR, commits as
// $FERRY_S3_COMMIT says; a directory created if missing: openStore is
// for the commands that save).
func (g *globals) openStore(ctx context.Context) (*session.Store, error) {
	return g.openStoreAs(ctx, stores.Options{Create: true})
}

// openExistingStore is openStore for the commands that only read or
// clean the store (list, restore, prune): a missing store is a
// *stores.MissingError, never created where a path was mistyped.
func (g *globals) openExistingStore(ctx context.Context) (*session.Store, error) {
	return g.openStoreAs(ctx, stores.Options{})
}

// openStoreUncached is openExistingStore without the chunk cache: for
// verify, which must read the store's own copies.
func (g *globals) openStoreUncached(ctx context.Context) (*session.Store, error) {
	return g.openStoreAs(ctx, stores.Options{NoCache: true})
}

func (g *globals) openStoreAs(ctx context.Context, o stores.Options) (*session.Store, error) {
	o.Endpoint, o.Grace = g.s3Endpoint, g.grace
	o.Commit = s3store.CommitMode(os.Getenv("FERRY_S3_COMMIT"))
	st, err := stores.Open(ctx, g.store, o)
	if errors.Is(err, stores.ErrLocation) {
		return nil, usageError{err}
	}
	return st, err
}

// exitVerify is `ferry session verify`'s exit code when the store is
// damaged; the report says what.
const exitVerify = 1

func newSessionCmd(g *globals, s streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Agents' session directories across runs",
		Long: `Save a sandbox's session directory as a snapshot in the session store,
restore it into the next sandbox, and keep the store in shape. The store is
--store DIR, else $FERRY_STORE, else $XDG_STATE_HOME/ferry
(~/.local/state/ferry). Only save (and run --session) creates a missing
store directory; list, verify, restore and prune fail on one, naming it.

A shared store, --store s3://BUCKET/PREFIX, may serve several machines.
Each keeps the chunks it has read or written in $FERRY_CACHE_DIR (default
$XDG_CACHE_HOME/ferry/chunks, or ~/.cache/ferry/chunks; "off": no cache),
checked on every use, so that it downloads none twice; verify bypasses it.
Commits use the server's conditional writes where it has them, else a lease
object (FERRY_S3_COMMIT=lease forces the lease, =conditional refuses a
server without them).`,
		Args: exactArgs(0),
		RunE: func(*cobra.Command, []string) error {
			return usagef("session needs a subcommand: save, restore, list, verify, prune or key")
		},
	}
	cmd.AddCommand(newSessionSaveCmd(g, s), newSessionRestoreCmd(g, s), newSessionListCmd(g, s),
		newSessionVerifyCmd(g, s), newSessionPruneCmd(g, s))
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

// sessionTarget splits a SANDBOX:DIR argument.
func sessionTarget(arg string) (sandbox, dir string, err error) {
	b, p, ok := remotePath(arg)
	if !ok {
		return "", "", usagef("%q is not SANDBOX:DIR", arg)
	}
	return b, p, nil
}

func newSessionSaveCmd(g *globals, s streams) *cobra.Command {
	var idle time.Duration
	cmd := &cobra.Command{
		Use:   "save SANDBOX:DIR KEY",
		Short: "Save a sandbox directory as the next snapshot of KEY",
		Long: `Save the directory DIR of the sandbox as the next snapshot of KEY in the
session store. Only chunks the store lacks are stored. Of two saves of one
key that race, exactly one commits; the other fails naming the key and
commits nothing. A relay lost after the commit does not fail the save:
ferry says "committed snapshot N of KEY, then lost the relay" and exits 0.

With --json it prints files, bytes, wire_bytes, new_chunks, new_bytes,
seconds, snapshot (the sequence number committed), key and mode, and
relay_lost (the channel's error) when the relay was lost after the commit.

A save through which next to nothing (under 64 bytes a second) has moved,
either way, for --idle-timeout fails; time spent waiting for a prune of
the store to finish does not count.`,
		Example: `  ferry session save box:.codex rtzll-rascal-42-1a2b3c4d5e`,
		Args:    exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			box, dir, err := sessionTarget(args[0])
			if err != nil {
				return err
			}
			idleTimeout, err := idleTimeout(idle)
			if err != nil {
				return err
			}
			key := args[1]
			if err := session.ValidKey(key); err != nil {
				return usageError{err}
			}
			st, err := g.openStore(cmd.Context())
			if err != nil {
				return err
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
			res, err := ferry.SaveSession(cmd.Context(), sb, st, session.SaveSpec{Dir: dir, Key: key})
			if err != nil {
				return err
			}
			if res.RelayLost != "" {
				// Said even with --quiet: the snapshot is safe, the relay
				// is not.
				fmt.Fprintf(s.err, "ferry: committed snapshot %d of %s, then lost the relay: %s\n", res.Snapshot, key, oneLine(errors.New(res.RelayLost)))
			}
			switch {
			case g.json:
				return json.NewEncoder(s.out).Encode(res)
			case !g.quiet && res.RelayLost == "":
				fmt.Fprintf(s.err, "saved %s as snapshot %d of %s: %d files, %s, %s new in %.1fs\n",
					args[0], res.Snapshot, key, res.Files, humanBytes(res.Bytes), humanBytes(res.NewBytes), res.Seconds)
			}
			return nil
		},
	}
	addIdleFlag(cmd, &idle)
	return cmd
}

func newSessionRestoreCmd(g *globals, s streams) *cobra.Command {
	var opts session.RestoreSpec
	var idle time.Duration
	cmd := &cobra.Command{
		Use:   "restore KEY SANDBOX:DIR [--snapshot N] [--replace] [--allow-missing]",
		Short: "Restore a snapshot of KEY into a sandbox directory",
		Long: `Restore the newest snapshot of KEY (or --snapshot N) into the directory DIR
of the sandbox, with modes, mtimes and symlinks kept. Every chunk the
snapshot needs is checked first: a missing or corrupt one fails the restore
before anything is written. The tree is staged in the sandbox and placed
only once the whole stream has been checked.

A missing DIR is created; a non-empty one is refused unless --replace,
which swaps the old content for the snapshot. A KEY without snapshots is an
error unless --allow-missing (a task's first run), which restores nothing,
also from a store directory that does not exist yet (a node's first run).

With --json it prints files, bytes, wire_bytes, seconds, snapshot, key and
mode, and "missing": true when --allow-missing found no snapshot.

A restore through which next to nothing (under 64 bytes a second) has
moved, either way, for --idle-timeout fails.`,
		Example: `  ferry session restore rtzll-rascal-42-1a2b3c4d5e box:.codex --allow-missing`,
		Args:    exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := session.ValidKey(key); err != nil {
				return usageError{err}
			}
			box, dir, err := sessionTarget(args[1])
			if err != nil {
				return err
			}
			if opts.Seq < 0 {
				return usagef("--snapshot %d: want a sequence number, 1 or more", opts.Seq)
			}
			idleTimeout, err := idleTimeout(idle)
			if err != nil {
				return err
			}
			st, err := g.openExistingStore(cmd.Context())
			var missing *stores.MissingError
			if errors.As(err, &missing) && missing.Dir && opts.AllowMissing && opts.Seq == 0 {
				// A node's first run: no store yet, so no snapshot of KEY.
				// The restore goes on from an empty store, checking the
				// sandbox as for any key without snapshots.
				st, err = session.New(session.Config{Backend: local.New(afero.NewMemMapFs())})
			}
			if err != nil {
				return err
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
			spec := opts
			spec.Key, spec.Dir = key, dir
			res, err := ferry.RestoreSession(cmd.Context(), sb, st, spec)
			if err != nil {
				return err
			}
			switch {
			case g.json:
				return json.NewEncoder(s.out).Encode(res)
			case g.quiet:
			case res.Missing:
				fmt.Fprintf(s.err, "no snapshot of %s: nothing restored\n", key)
			default:
				fmt.Fprintf(s.err, "restored snapshot %d of %s to %s: %d files, %s in %.1fs\n",
					res.Snapshot, key, args[1], res.Files, humanBytes(res.Bytes), res.Seconds)
			}
			return nil
		},
	}
	cmd.Flags().Int64Var(&opts.Seq, "snapshot", 0, "the snapshot to restore (default the newest)")
	cmd.Flags().BoolVar(&opts.Replace, "replace", false, "replace a non-empty target directory")
	cmd.Flags().BoolVar(&opts.AllowMissing, "allow-missing", false, "succeed, restoring nothing, when KEY has no snapshot")
	addIdleFlag(cmd, &idle)
	return cmd
}

func newSessionListCmd(g *globals, s streams) *cobra.Command {
	return &cobra.Command{
		Use:   "list [KEY]",
		Short: "List the snapshots of KEY, or of every key",
		Long: `List the snapshots in the session store, of KEY or of every key: sequence
number, time, files, bytes, and the new bytes each save stored. With --json,
one array of objects. A snapshot whose manifest cannot be read is listed
as unreadable (with --json, with an error field) and named on stderr;
the others are listed all the same.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := optionalKey(args)
			if err != nil {
				return err
			}
			st, err := g.openExistingStore(cmd.Context())
			if err != nil {
				return err
			}
			list, err := st.List(cmd.Context(), key)
			if err != nil {
				return err
			}
			if g.json {
				if list == nil {
					list = []session.SnapshotInfo{}
				}
				if err := json.NewEncoder(s.out).Encode(list); err != nil {
					return err
				}
				warnUnreadable(s, list)
				return nil
			}
			tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tSNAPSHOT\tTIME\tFILES\tBYTES\tNEW BYTES")
			for _, i := range list {
				if i.Err != "" {
					fmt.Fprintf(tw, "%s\t%d\tunreadable\t-\t-\t-\n", i.Key, i.Seq)
					continue
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", i.Key, i.Seq, i.Time.Local().Format(time.DateTime), i.Files, humanBytes(i.Bytes), humanBytes(i.NewBytes))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			warnUnreadable(s, list)
			return nil
		},
	}
}

// warnUnreadable names on stderr the snapshots of list whose manifests
// cannot be read, as prune does.
func warnUnreadable(s streams, list []session.SnapshotInfo) {
	for _, i := range list {
		if i.Err != "" {
			fmt.Fprintf(s.err, "ferry: unreadable snapshot %s/%d: %s\n", i.Key, i.Seq, i.Err)
		}
	}
}

func newSessionVerifyCmd(g *globals, s streams) *cobra.Command {
	var repair bool
	var from string
	cmd := &cobra.Command{
		Use:   "verify [KEY] [--repair-index] [--repair SANDBOX:DIR]",
		Short: "Re-read every chunk and report missing or corrupt ones",
		Long: `Read every snapshot of KEY (of every key, and then every chunk no snapshot
references, without KEY) and re-hash every chunk. Missing and corrupt
chunks are reported with the snapshots they break, and ferry exits 1.
With --json, the report is one object: snapshots, chunks, missing,
corrupt, broken, packs, pack_faults.

An S3 store keeps chunks in packs, each with an index object saying where
its chunks are. --repair-index first rewrites, from the pack's own
trailer, every index object that is missing, unreadable or wrong (each
pack is read whole and checked against its name; a damaged pack is left
for verify to report), and names each one it rewrote on stderr.

--repair SANDBOX:DIR stores the missing chunks again from a sandbox
directory that still holds the files they were cut from (the session
directory saved, or a copy), then verifies again: it says how many it
restored, and ferry exits 0 only if the store is then sound. Only content
that hashes to a missing chunk is stored, and no snapshot is written. With
--json the object also has repaired (the count) and repair.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := optionalKey(args)
			if err != nil {
				return err
			}
			if from != "" {
				if _, _, err := sessionTarget(from); err != nil {
					return err
				}
			}
			st, err := g.openStoreUncached(cmd.Context())
			if err != nil {
				return err
			}
			if repair {
				fixed, err := st.RepairIndexes(cmd.Context())
				if err != nil {
					return err
				}
				for _, name := range fixed {
					fmt.Fprintf(s.err, "rewrote %s\n", name)
				}
			}
			rep, err := st.Verify(cmd.Context(), key)
			if err != nil {
				return err
			}
			out := verifyResult{VerifyReport: rep}
			if from != "" {
				if rep, out.Repair, err = g.repairChunks(cmd.Context(), s, st, key, from, rep); err != nil {
					return err
				}
				n := len(out.Repair.Restored)
				out.VerifyReport, out.Repaired = rep, &n
			}
			if g.json {
				if err := json.NewEncoder(s.out).Encode(out); err != nil {
					return err
				}
			} else {
				for _, id := range rep.Missing {
					fmt.Fprintf(s.out, "missing chunk %s\n", id)
				}
				for _, id := range rep.Corrupt {
					fmt.Fprintf(s.out, "corrupt chunk %s\n", id)
				}
				for _, b := range rep.Broken {
					why := b.Err
					if why == "" {
						why = fmt.Sprintf("%d missing, %d corrupt chunk(s)", len(b.Missing), len(b.Corrupt))
					}
					fmt.Fprintf(s.out, "broken snapshot %s: %s\n", b.SnapshotRef, why)
				}
				for _, f := range rep.PackFaults {
					fmt.Fprintf(s.out, "damaged %s: %s\n", f.Object, f.Err)
				}
			}
			if !rep.OK() {
				fmt.Fprintf(s.err, "ferry: session store damaged: %d missing, %d corrupt chunk(s), %d broken snapshot(s), %d damaged pack or index object(s)\n",
					len(rep.Missing), len(rep.Corrupt), len(rep.Broken), len(rep.PackFaults))
				return exitCode(exitVerify)
			}
			if !g.json && !g.quiet {
				fmt.Fprintf(s.err, "ok: %d snapshots, %d chunks\n", rep.Snapshots, rep.Chunks)
				if rep.TempFiles > 0 {
					fmt.Fprintf(s.err, "removed %d leftover temporary file(s)\n", rep.TempFiles)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&repair, "repair-index", false, "first rewrite missing or wrong pack index objects from the packs' own trailers")
	cmd.Flags().StringVar(&from, "repair", "", "store missing chunks again from `SANDBOX:DIR`, a sandbox directory that still holds their files, then verify again")
	return cmd
}

func newSessionPruneCmd(g *globals, s streams) *cobra.Command {
	var opts session.PruneOptions
	var idle days
	cmd := &cobra.Command{
		Use:   "prune [--keep N] [--older-than DUR] [--idle DUR] [--key KEY] [--dry-run]",
		Short: "Remove old snapshots, then chunks nothing references",
		Long: `Remove snapshots past the newest --keep N of each key, or older than
--older-than DUR (which may remove every snapshot of an idle key), then the
chunks no remaining snapshot references, once they are older than the
grace period (--grace, an hour by default). With none of these flags, only
such chunks go.

--idle DUR removes every snapshot of each key last used longer ago than
DUR (14d, or a Go duration such as 336h), as Rascal removes a task's
session once RASCAL_TASK_SESSION_TTL_DAYS have passed: a key's last use is
the time of its newest snapshot. A key a save is writing is in use and
stays whole. --dry-run removes nothing and reports what would go.

Prune is safe beside saves on any node: it takes a lock object in the
store, keeps the newest snapshot of a key that a save is writing
("deferred": a later prune removes it) and every chunk such a save may
reuse; a save that starts while a prune runs waits for it. A snapshot
whose manifest cannot be read is named, never counted among the kept
ones, and removed only by --older-than. Leftover temporary files of
writers that were killed (local stores) go once past the grace period.

With --json the report is one object: snapshots, idle_keys (key,
last_used), chunks, packs, stored_bytes, deferred, saves_in_flight,
unreadable, temp_files, stale_locks, chunks_kept, dry_run.`,
		Example: `  ferry session prune --keep 3 --older-than 720h
  ferry session prune --idle 14d --dry-run`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Keep < 0 || opts.OlderThan < 0 {
				return usagef("--keep and --older-than must not be negative")
			}
			opts.Idle = time.Duration(idle)
			if g.grace < 0 {
				return usagef("--grace must not be negative")
			}
			if opts.Key != "" {
				if err := session.ValidKey(opts.Key); err != nil {
					return usageError{err}
				}
			}
			st, err := g.openExistingStore(cmd.Context())
			if err != nil {
				return err
			}
			rep, err := st.Prune(cmd.Context(), opts)
			if rep != nil && g.json {
				if rep.Snapshots == nil {
					rep.Snapshots = []session.SnapshotRef{}
				}
				out := struct {
					*session.PruneReport
					DryRun bool `json:"dry_run,omitempty"`
				}{rep, opts.DryRun}
				if e := json.NewEncoder(s.out).Encode(out); e != nil && err == nil {
					err = e
				}
			}
			if rep != nil && !g.json {
				for _, u := range rep.Unreadable {
					fmt.Fprintf(s.err, "ferry: unreadable snapshot %s kept out of the count: %s\n", u.SnapshotRef, u.Err)
				}
			}
			if err != nil {
				return err
			}
			if !g.json && !g.quiet {
				verb := "removed"
				if opts.DryRun {
					verb = "would remove"
				}
				for _, k := range rep.IdleKeys {
					fmt.Fprintf(s.err, "%s idle key %s, last used %s\n", verb, k.Key, k.LastUsed.UTC().Format(time.RFC3339))
				}
				fmt.Fprintf(s.err, "%s %d snapshot(s) and %d chunk(s), %s stored\n", verb, len(rep.Snapshots), rep.Chunks+rep.Packs, humanBytes(rep.StoredBytes))
				if len(rep.Deferred) > 0 {
					fmt.Fprintf(s.err, "kept %d snapshot(s) a save in flight starts from: %v\n", len(rep.Deferred), rep.Deferred)
				}
				if rep.ChunksKept != "" {
					fmt.Fprintf(s.err, "removed no chunk: %s\n", rep.ChunksKept)
				}
				if rep.TempFiles > 0 || rep.StaleLocks > 0 {
					fmt.Fprintf(s.err, "removed %d leftover temporary file(s) and %d stale lock(s)\n", rep.TempFiles, rep.StaleLocks)
				}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&opts.Keep, "keep", 0, "keep the N newest snapshots of each key (0: no limit)")
	cmd.Flags().DurationVar(&opts.OlderThan, "older-than", 0, "remove snapshots older than this (0: no limit)")
	cmd.Flags().Var(&idle, "idle", "remove every snapshot of keys unused for longer than `DUR`: 14d, or a Go duration such as 336h (0: none)")
	cmd.Flags().BoolVar(&opts.DryRun, "dry-run", false, "remove nothing; report what would be removed")
	cmd.Flags().StringVar(&opts.Key, "key", "", "remove snapshots of this key only (chunks are collected across keys)")
	cmd.Flags().DurationVar(&g.grace, "grace", 0, "remove unreferenced chunks only once older than this (0: an hour)")
	return cmd
}

// maxArgs is cobra.MaximumNArgs as a usage error.
func maxArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return usagef("%s takes at most %d argument(s), got %d", cmd.CommandPath(), n, len(args))
		}
		return nil
	}
}

// optionalKey is the [KEY] argument of list and verify: "" for every key.
func optionalKey(args []string) (string, error) {
	if len(args) == 0 {
		return "", nil
	}
	if err := session.ValidKey(args[0]); err != nil {
		return "", usageError{err}
	}
	return args[0], nil
}

// days is a duration flag that also takes whole days, "14d", as Rascal
// counts a session's TTL; "14d12h" adds a Go duration to them.
type days time.Duration

// String is "0" for no limit, which pflag takes for the zero default.
func (d *days) String() string {
	if *d == 0 {
		return "0"
	}
	return time.Duration(*d).String()
}
func (d *days) Type() string { return "duration" }

func (d *days) Set(v string) error {
	if v == "" {
		return errors.New("invalid duration \"\": want N days (14d) or a Go duration (336h)")
	}
	var n time.Duration
	rest := v
	if i := strings.IndexByte(v, 'd'); i > 0 {
		k, err := strconv.Atoi(v[:i])
		if err != nil || k < 0 {
			return fmt.Errorf("invalid duration %q: want N days (14d) or a Go duration (336h)", v)
		}
		n, rest = time.Duration(k)*24*time.Hour, v[i+1:]
	}
	if rest != "" {
		x, err := time.ParseDuration(rest)
		if err != nil || x < 0 {
			return fmt.Errorf("invalid duration %q: want N days (14d) or a Go duration (336h)", v)
		}
		n += x
	}
	*d = days(n)
	return nil
}
