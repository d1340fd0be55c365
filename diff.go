package ferry

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/google/renameio/v2"

	"github.com/ferry-dev/ferry/session/treediff"
	"github.com/ferry-dev/ferry/transfer"
)

// Manifest lists the directory dir of the sandbox (relative to its
// workspace, or absolute) under sb's idle timeout: each entry's path,
// type, mode, size, content digest and symlink target. In agent mode the
// agent hashes next to the data and no file content crosses the relay;
// in POSIX mode the directory is downloaded to a private temp directory
// and hashed here, which the manifest's MovedContents says. See
// treediff.Take for what is checked.
func Manifest(ctx context.Context, sb Sandbox, dir string, o treediff.Options) (_ *treediff.Manifest, err error) {
	ctx, sb, idle := sb.watchIdle(ctx, fmt.Sprintf("manifest %s:%s", sb.Name, dir))
	defer func() { err = idle.end(err) }()
	return use(ctx, sb, fmt.Sprintf("manifest %s:%s", sb.Name, dir), func(r transfer.Remote) (*treediff.Manifest, error) {
		return treediff.Take(ctx, r, dir, o)
	})
}

// Diff is the diff of two manifests of one directory, limited to the
// paths f matches: treediff.Diff.
func Diff(before, after *treediff.Manifest, f treediff.Filter) (*treediff.Report, error) {
	return treediff.Diff(before, after, f)
}

// RunDiff is what a run's --diff found in one directory, in the shape
// `ferry run --json` prints: the totals and the summary line; the whole
// report is in the run directory's workspace-diff.json.
type RunDiff struct {
	Dir     string           `json:"dir"`
	Summary string           `json:"summary,omitempty"`
	Totals  *treediff.Totals `json:"totals,omitempty"`
	Error   string           `json:"error,omitempty"`
}

// runDiffs carries a run's before manifests from its pre-exec phase to
// its post-exec phase, through the connections each already holds (one
// exec each in agent mode).
type runDiffs struct {
	before []*treediff.Manifest
	after  []RunDiff
	err    error
}

// result is what takeAfter found, for RunResult.
func (d *runDiffs) result() ([]RunDiff, error) {
	if d == nil {
		return nil, nil
	}
	return d.after, d.err
}

// diffOptions are the manifests' options of a run.
func (spec RunSpec) diffOptions(since *treediff.Manifest) treediff.Options {
	return treediff.Options{Limits: spec.Limits, Since: since, ContentCap: spec.DiffContent}
}

// takeBefore lists each of spec.Diff's directories through r, before the
// command. A failure fails the run before the command runs: a diff
// without its before would say nothing true.
func (d *runDiffs) takeBefore(ctx context.Context, r transfer.Remote, spec RunSpec) error {
	if d == nil {
		return nil
	}
	if err := spec.DiffFilter.Validate(); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	for _, dir := range spec.Diff {
		m, err := treediff.Take(ctx, r, dir, spec.diffOptions(nil))
		if err != nil {
			return fmt.Errorf("run: diff: %w", err)
		}
		d.before = append(d.before, m)
	}
	return nil
}

// takeAfter lists each directory again through r, after the command,
// and writes the reports to spec.Out's workspace-diff.json. A directory
// that fails is reported so, beside the others; d.err is the first such
// failure.
func (d *runDiffs) takeAfter(ctx context.Context, r transfer.Remote, spec RunSpec) {
	if d == nil || len(d.before) == 0 {
		return
	}
	d.after, d.err = d.report(ctx, r, spec)
}

func (d *runDiffs) report(ctx context.Context, r transfer.Remote, spec RunSpec) ([]RunDiff, error) {
	doc := treediff.Document{Format: treediff.Format, Sandbox: r.Target().Name, Dirs: []*treediff.Report{}}
	var out []RunDiff
	var first error
	for _, before := range d.before {
		rd := RunDiff{Dir: before.Dir}
		rep, err := runDiffOne(ctx, r, spec, before)
		if err != nil {
			rd.Error = err.Error()
			rep = &treediff.Report{Dir: before.Dir, Error: rd.Error}
			if first == nil {
				first = err
			}
		} else {
			rd.Summary, rd.Totals = rep.Summary(), &rep.Totals
		}
		doc.Dirs = append(doc.Dirs, rep)
		out = append(out, rd)
	}
	if err := writeDocument(filepath.Join(spec.Out, treediff.DocumentFile), &doc); err != nil && first == nil {
		first = err
	}
	return out, first
}

func runDiffOne(ctx context.Context, r transfer.Remote, spec RunSpec, before *treediff.Manifest) (*treediff.Report, error) {
	after, err := treediff.Take(ctx, r, before.Dir, spec.diffOptions(before))
	if err != nil {
		return nil, err
	}
	return treediff.Diff(before, after, spec.DiffFilter)
}

// writeDocument writes doc to name atomically.
func writeDocument(name string, doc *treediff.Document) error {
	if doc == nil {
		return errors.New("write diff: nil document")
	}
	b, err := doc.MarshalIndent()
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := renameio.WriteFile(name, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
