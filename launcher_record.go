package ferry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/renameio/v2"
	"golang.org/x/sys/unix"

	"github.com/ferry-dev/ferry/session/treediff"
)

// The Launcher keeps what it knows about a run in the run directory, so
// that any Launcher, in any process, can take a run over from one that
// died: nothing lives only in memory.
const (
	// launchRecordFile is the run's record (launchRecord), replaced
	// atomically.
	launchRecordFile = ".ferry-launch.json"
	// launchLockFile is locked (flock) by the Launcher that starts, stops
	// or finishes the run, so that two never pull and save one run at
	// once. The kernel lets go of it when its process dies.
	launchLockFile = ".ferry-launch.lock"
	// handleIndexDir, in the Launcher's RunsDir, maps a handle's name to
	// its run directory: a file per name, handleEntry, since a run
	// directory is the caller's to choose and a name cannot be turned
	// back into a run id.
	handleIndexDir = ".ferry-handles"
)

// handleEntry is a handle's entry in the index.
type handleEntry struct {
	RunID  string `json:"run_id"`
	RunDir string `json:"run_dir"`
}

// writeIndex records that the handle name is the run runID in dir. A name
// already taken by another run is an error: two run ids that sanitize to
// one name cannot both run.
func writeIndex(runsDir, name, runID, dir string) error {
	idx := filepath.Join(runsDir, handleIndexDir)
	if err := os.MkdirAll(idx, 0o755); err != nil {
		return fmt.Errorf("write handle index: %w", err)
	}
	p := filepath.Join(idx, name+".json")
	if b, err := os.ReadFile(p); err == nil {
		var e handleEntry
		if json.Unmarshal(b, &e) == nil && e.RunDir == dir && e.RunID == runID {
			return nil
		}
		if e.RunID != runID {
			return fmt.Errorf("handle %s is run %s's, not %s's", name, e.RunID, runID)
		}
	}
	b, err := json.Marshal(handleEntry{RunID: runID, RunDir: dir})
	if err != nil {
		return fmt.Errorf("write handle index: %w", err)
	}
	return writeFileAtomic(idx, name+".json", append(b, '\n'))
}

// readIndex is the run directory of the handle name; a name the index
// does not hold is ErrUnknownRun.
func readIndex(runsDir, name string) (string, error) {
	if strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return "", fmt.Errorf("handle %q: %w", name, ErrUnknownRun)
	}
	b, err := os.ReadFile(filepath.Join(runsDir, handleIndexDir, name+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("handle %s: %w", name, ErrUnknownRun)
	}
	if err != nil {
		return "", fmt.Errorf("read handle index: %w", err)
	}
	var e handleEntry
	if err := json.Unmarshal(b, &e); err != nil || e.RunDir == "" {
		return "", fmt.Errorf("read handle index entry %s: bad entry %q", name, b)
	}
	return e.RunDir, nil
}

// launchRecord is .ferry-launch.json.
type launchRecord struct {
	RunID   string `json:"run_id"`
	Sandbox string `json:"sandbox"`
	// StateDir is the supervisor's state directory in the sandbox.
	StateDir string           `json:"state_dir"`
	Sessions []SessionMapping `json:"sessions,omitempty"`
	// Diff and DiffFilter are LaunchSpec's; the before manifests are in
	// diffBeforeDir until the finish.
	Diff       []string         `json:"diff,omitempty"`
	DiffFilter *treediff.Filter `json:"diff_filter,omitempty"`
	Started    time.Time        `json:"started"`
	// Spawned: the command was spawned. A record without it is a start's
	// intent, written before anything else: the start is under way (it
	// holds the lock) or died, before the spawn or after it.
	Spawned bool `json:"spawned"`

	// Finished: the command has ended, the artifacts are in the run
	// directory and the sessions are saved (or finishing was given up
	// after maxFinishAttempts; FinishError says why).
	Finished       bool         `json:"finished"`
	ExitCode       int          `json:"exit_code"`
	TimedOut       bool         `json:"timed_out,omitempty"`
	Lost           bool         `json:"lost,omitempty"`
	FinishedAt     time.Time    `json:"finished_at,omitzero"`
	Pull           *PullResult  `json:"pull,omitempty"`
	PullError      string       `json:"pull_error,omitempty"`
	SessionResults []RunSession `json:"session_results,omitempty"`
	FinishAttempts int          `json:"finish_attempts,omitempty"`
	FinishError    string       `json:"finish_error,omitempty"`
	// DiffResults are the finish's diffs of Diff, in workspace-diff.json.
	DiffResults []RunDiff `json:"diff_results,omitempty"`
	// Events is what the finish wrote of the sandbox's OCSF events.
	Events *EventsResult `json:"events,omitempty"`
	// Foreign: the sandbox of the run's name was made for another run
	// (openshell.ForeignError, its text): the run is finished, lost, and
	// that sandbox is never touched, not even by Remove.
	Foreign string `json:"foreign,omitempty"`
	// Removed: Remove deleted the run's sandbox. The run is then unknown,
	// as a container is to Docker after docker rm: Inspect and Stop give
	// ErrUnknownRun, and Remove again is no error.
	Removed bool `json:"removed,omitempty"`
}

// readRecord reads the run directory's record; a missing one, or one of
// a removed run (returned with the error), is ErrUnknownRun.
func readRecord(dir string) (*launchRecord, error) {
	b, err := os.ReadFile(filepath.Join(dir, launchRecordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read run record in %s: %w", dir, ErrUnknownRun)
	}
	if err != nil {
		return nil, fmt.Errorf("read run record: %w", err)
	}
	var rec launchRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("read run record %s: %w", filepath.Join(dir, launchRecordFile), err)
	}
	if rec.Removed {
		// The record all the same, for what outlives the sandbox (its
		// events).
		return &rec, fmt.Errorf("run %s was removed: %w", rec.RunID, ErrUnknownRun)
	}
	return &rec, nil
}

// writeRecord replaces the run directory's record atomically, so that a
// reader, or a Launcher after a crash, finds the old record or the new
// one, whole.
func writeRecord(dir string, rec *launchRecord) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("write run record: %w", err)
	}
	if err := writeFileAtomic(dir, launchRecordFile, append(b, '\n')); err != nil {
		return fmt.Errorf("write run record: %w", err)
	}
	return nil
}

// writeFileAtomic replaces dir/name with data, mode 0600 (renameio: a
// synced temporary file renamed over it), then syncs the directory, so
// that a record a crash interrupts is the old one or the new one.
func writeFileAtomic(dir, name string, data []byte) error {
	err := renameio.WriteFile(filepath.Join(dir, name), data, 0o600, renameio.WithStaticPermissions(0o600), renameio.WithTempDir(dir))
	if err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// lockRun takes the run directory's lock, waiting for it while ctx lasts.
func lockRun(ctx context.Context, dir string) (unlock func(), err error) {
	for {
		unlock, ok, err := tryLockRun(dir)
		if err != nil || ok {
			return unlock, err
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("lock run %s: %w", dir, ctx.Err())
		case <-t.C:
		}
	}
}

// tryLockRun takes the run directory's lock if it is free.
func tryLockRun(dir string) (unlock func(), ok bool, err error) {
	f, err := os.OpenFile(filepath.Join(dir, launchLockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("lock run: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock run %s: %w", dir, err)
	}
	return func() { f.Close() }, true, nil
}
