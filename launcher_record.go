package ferry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
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
)

// launchRecord is .ferry-launch.json.
type launchRecord struct {
	RunID   string `json:"run_id"`
	Sandbox string `json:"sandbox"`
	// StateDir is the supervisor's state directory in the sandbox.
	StateDir string           `json:"state_dir"`
	Sessions []SessionMapping `json:"sessions,omitempty"`
	Started  time.Time        `json:"started"`

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
}

// readRecord reads the run directory's record; a missing one is
// ErrUnknownRun.
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
	return &rec, nil
}

// writeRecord replaces the run directory's record atomically (a synced
// temporary file renamed over it), so that a reader, or a Launcher after a
// crash, finds the old record or the new one, whole.
func writeRecord(dir string, rec *launchRecord) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("write run record: %w", err)
	}
	f, err := os.CreateTemp(dir, launchRecordFile+".tmp-")
	if err != nil {
		return fmt.Errorf("write run record: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, launchRecordFile))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write run record: %w", err)
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
