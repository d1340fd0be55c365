package ferry

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/google/renameio/v2"

	"github.com/ferry-dev/ferry/session/treediff"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// diffBeforeDir, in a run directory, holds a detached run's before
// manifests (LaunchSpec.Diff) from its start to its finish, so that the
// Launcher that finishes the run need not be the one that started it.
// The artifact pull writes only the artifacts' names: the sandbox cannot
// plant one.
const diffBeforeDir = ".ferry-diff"

// takeDiffBefore lists each of dirs through r before the command, into
// the run directory. A failure fails the start: a diff without its
// before would say nothing true.
func (l *Launcher) takeDiffBefore(ctx context.Context, r transfer.Remote, runDir string, dirs []string) error {
	if len(dirs) == 0 {
		return nil
	}
	bd := filepath.Join(runDir, diffBeforeDir)
	if err := os.MkdirAll(bd, 0o700); err != nil {
		return fmt.Errorf("diff: %w", err)
	}
	for i, d := range dirs {
		m, err := treediff.Take(ctx, r, d, treediff.Options{Limits: l.cfg.Limits})
		if err != nil {
			return fmt.Errorf("diff: %w", err)
		}
		var b bytes.Buffer
		if err := m.WriteJSON(&b); err != nil {
			return fmt.Errorf("diff: %w", err)
		}
		p := filepath.Join(bd, strconv.Itoa(i)+".json")
		if err := renameio.WriteFile(p, b.Bytes(), 0o600, renameio.WithStaticPermissions(0o600)); err != nil {
			return fmt.Errorf("diff: %w", err)
		}
	}
	return nil
}

// diffBefore loads the run's before manifests for its finish, which
// lists the directories again through the finish's connection (RunSpec's
// diffs, as ferry run --diff does) and writes workspace-diff.json. A
// before manifest that is gone or unreadable is that directory's error,
// in fails.
func (l *Launcher) diffBefore(runDir string, rec *launchRecord) (d *runDiffs, fails []RunDiff) {
	if len(rec.Diff) == 0 {
		return nil, nil
	}
	d = &runDiffs{}
	for i, dir := range rec.Diff {
		m, err := readBefore(filepath.Join(runDir, diffBeforeDir, strconv.Itoa(i)+".json"), l.cfg.Limits)
		if err == nil && m.Dir != dir {
			err = fmt.Errorf("before manifest of %s names %s", dir, m.Dir)
		}
		if err != nil {
			fails = append(fails, RunDiff{Dir: dir, Error: err.Error()})
			continue
		}
		d.before = append(d.before, m)
	}
	return d, fails
}

// diffDone is the finish's diffs. The before manifests stay until the
// run is recorded finished: a finish that is tried again diffs again.
func diffDone(d *runDiffs, fails []RunDiff) ([]RunDiff, error) {
	out, err := d.result()
	out = append(out, fails...)
	if err == nil && len(fails) > 0 {
		err = fmt.Errorf("diff %s: %s", fails[0].Dir, fails[0].Error)
	}
	return out, err
}

func readBefore(p string, lim archive.Limits) (*treediff.Manifest, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("before manifest: %w", err)
	}
	defer f.Close()
	return treediff.ReadManifest(f, lim)
}
