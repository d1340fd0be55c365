package ferry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ferry-dev/ferry/transfer/agent"
)

// LiveLogs configures the live copies of a running run's logs: each
// Inspect that finds the command running fetches what the sandbox has
// appended to Files since the host's copies end, into the run directory,
// so that the caller (rascal logs) can read them during the run. The
// final pull replaces them with the checked whole files.
//
// A step is bounded and owns nothing after it returns: no goroutine
// outlives the Inspect, and a Launcher in a new process resumes from the
// host files' sizes.
type LiveLogs struct {
	// Off disables the live copies: the files appear at the end only.
	Off bool
	// Files are followed, names in the sandbox's meta directory and in
	// the run directory; default Followed (agent.ndjson, runner.log).
	Files []string
	// StepBytes bounds what one step appends, all files together (each
	// gets an equal share); default 4 MiB. The agent sends a file in
	// pieces of up to 256 KiB and gRPC's window lets a few more be in
	// flight: what arrives past the share is dropped, and fetched again
	// by the next step.
	StepBytes int64
	// StepTime bounds one step; default 250 ms, well under Rascal's
	// 1 s Inspect interval.
	StepTime time.Duration
}

func (c *LiveLogs) applyDefaults() {
	if len(c.Files) == 0 {
		c.Files = Followed
	}
	if c.StepBytes <= 0 {
		c.StepBytes = 4 << 20
	}
	if c.StepTime <= 0 {
		c.StepTime = 250 * time.Millisecond
	}
}

// liveOverlap is how many of the host copy's last bytes each step fetches
// again and compares, before it appends anything: a step starts a new
// stream, which cannot know what the file was before, so a file truncated
// and regrown past the host's size between two steps would otherwise be
// spliced onto the old copy.
const liveOverlap = 1024

// maxLiveRestarts bounds how often one run's live copy of a file is
// started over because the sandbox truncated or rewrote it: a sandbox
// that does so without end would have every step copy the file anew.
const maxLiveRestarts = 8

// liveStateFile, in the run directory, says which live copies a step has
// appended to, how often each was started over and which were given up,
// whichever Launcher saw it.
const liveStateFile = ".ferry-live.json"

// liveState is liveStateFile.
type liveState struct {
	Files map[string]*liveFileState `json:"files,omitempty"`
}

type liveFileState struct {
	// Appended: a step has written to the host copy (or emptied it): it
	// is no longer the file the run directory had before the run.
	Appended bool `json:"appended,omitempty"`
	// Restarts counts the copies started over because the sandbox's file
	// no longer continued the host's.
	Restarts int `json:"restarts,omitempty"`
	// Stopped says why the file is no longer followed this run: it was
	// started over maxLiveRestarts times and diverged again. The final
	// pull still replaces it.
	Stopped string `json:"stopped,omitempty"`
}

func readLiveState(dir string) (*liveState, error) {
	st := &liveState{Files: map[string]*liveFileState{}}
	b, err := os.ReadFile(filepath.Join(dir, liveStateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read live log state: %w", err)
	}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("read live log state %s: %w", filepath.Join(dir, liveStateFile), err)
	}
	if st.Files == nil {
		st.Files = map[string]*liveFileState{}
	}
	return st, nil
}

func (st *liveState) file(name string) *liveFileState {
	f := st.Files[name]
	if f == nil {
		f = &liveFileState{}
		st.Files[name] = f
	}
	return f
}

func writeLiveState(dir string, st *liveState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("write live log state: %w", err)
	}
	if err := writeFileAtomic(dir, liveStateFile, append(b, '\n')); err != nil {
		return fmt.Errorf("write live log state: %w", err)
	}
	return nil
}

// divergedError means the sandbox's file no longer continues the host's
// live copy of it: it was truncated, replaced or rewritten. Nothing is
// appended to the copy: it is started over.
type divergedError struct {
	// File is the followed file's name.
	File string
	// HostSize is the host copy's size when it diverged.
	HostSize int64
	Reason   string
}

func (e *divergedError) Error() string {
	return fmt.Sprintf("live copy of %s (%d bytes): %s", e.File, e.HostSize, e.Reason)
}

// errStepFull ends a stream whose step has appended its share.
var errStepFull = errors.New("live log step full")

// liveCopy is one followed file during a step.
type liveCopy struct {
	name string
	f    *os.File
	size int64
	// overlap is the host copy's last bytes; checked is how many of them
	// the sandbox's file has been seen to repeat.
	overlap []byte
	checked int
	// touched: this step has written to the host copy or emptied it.
	touched bool
}

// followStep appends to the run directory's live copies what the
// sandbox's files have gained since, bounded by LiveLogs and by the
// pull's Limits. It is best effort: a failure is logged, the run goes
// on, and the next step starts again from the host files' sizes. A copy
// only ever grows by bytes read at the offset where it ends, after its
// last bytes were found again at theirs. The caller holds the run's lock.
func (l *Launcher) followStep(ctx context.Context, dir string, rec *launchRecord, c *agent.Client) {
	cfg := l.cfg.LiveLogs
	if cfg.Off || c == nil {
		return
	}
	log := l.cfg.Logger.With("run_id", rec.RunID)
	if err := l.stepLive(ctx, dir, rec, c, log); err != nil {
		log.Debug("live log step ended early", "err", err)
	}
}

func (l *Launcher) stepLive(ctx context.Context, dir string, rec *launchRecord, c *agent.Client, log *slog.Logger) error {
	cfg := l.cfg.LiveLogs
	limits, err := l.cfg.Limits.WithDefaults()
	if err != nil {
		return err
	}
	st, err := readLiveState(dir)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StepTime)
	defer cancel()

	// The pull's limits bound the live copies too: a file may grow to
	// MaxFileSize, all of them together to MaxTotalBytes.
	var copies []*liveCopy
	defer func() {
		for _, lc := range copies {
			lc.f.Close()
		}
	}()
	var total int64
	for _, name := range cfg.Files {
		if st.file(name).Stopped != "" {
			continue
		}
		lc, err := openLiveCopy(filepath.Join(dir, name), name)
		if err != nil {
			return err
		}
		copies = append(copies, lc)
		total += lc.size
	}
	share := max(cfg.StepBytes/int64(max(len(copies), 1)), 1)
	changed := false
	var errs []error
	for _, lc := range copies {
		if ctx.Err() != nil {
			break
		}
		fst := st.file(lc.name)
		room := min(share, limits.MaxFileSize-lc.size, limits.MaxTotalBytes-total)
		if room <= 0 {
			continue
		}
		total -= lc.size
		err := l.stepFile(ctx, c, lc, room)
		var de *divergedError
		if errors.As(err, &de) {
			changed = true
			if fst.Restarts >= maxLiveRestarts {
				fst.Stopped = de.Reason
				log.Warn("live log copy stopped: the sandbox's file was truncated or rewritten too often; the final pull replaces it",
					"file", lc.name, "host_size", lc.size, "restarts", fst.Restarts, "reason", de.Reason)
				total += lc.size
				continue
			}
			// The sandbox started the file over (Rascal's worker truncates
			// agent.ndjson when it retries the agent): so does the host's
			// copy, rather than keep bytes the file no longer has.
			fst.Restarts++
			log.Warn("live log copy restarted: the sandbox's file no longer continues the host's copy; copying it again from its start",
				"file", lc.name, "host_size", lc.size, "restart", fst.Restarts, "reason", de.Reason)
			if err = lc.restart(); err == nil {
				err = l.stepFile(ctx, c, lc, min(share, limits.MaxFileSize, limits.MaxTotalBytes-total))
			}
			if errors.As(err, &de) {
				// Rewritten again already: the next step sees to it.
				err = nil
			}
		}
		total += lc.size
		if lc.touched && !fst.Appended {
			fst.Appended, changed = true, true
		}
		switch {
		case errors.Is(err, errStepFull):
			if lc.size >= limits.MaxFileSize || total >= limits.MaxTotalBytes {
				log.Warn("live log copy reached the pull's limit; it grows no more this run",
					"file", lc.name, "host_size", lc.size, "max_file_size", limits.MaxFileSize, "max_total_bytes", limits.MaxTotalBytes)
			}
		case err != nil:
			errs = append(errs, fmt.Errorf("follow %s: %w", lc.name, err))
		}
	}
	if changed {
		errs = append(errs, writeLiveState(dir, st))
	}
	return errors.Join(errs...)
}

// restart empties the host copy, to be copied again from the start.
func (lc *liveCopy) restart() error {
	if err := lc.f.Truncate(0); err != nil {
		return fmt.Errorf("empty live copy %s: %w", lc.name, err)
	}
	lc.size, lc.overlap, lc.checked, lc.touched = 0, nil, 0, true
	return nil
}

// openLiveCopy opens the host copy p, creating it empty, and reads its
// last bytes.
func openLiveCopy(p, name string) (*liveCopy, error) {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open live copy: %w", err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("live copy %s is not a regular file (%v)", p, err)
	}
	lc := &liveCopy{name: name, f: f, size: fi.Size()}
	lc.overlap = make([]byte, min(lc.size, liveOverlap))
	if _, err := f.ReadAt(lc.overlap, lc.size-int64(len(lc.overlap))); err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, fmt.Errorf("read live copy %s: %w", p, err)
	}
	return lc, nil
}

// stepFile fetches lc's file from just before the host copy's end to the
// sandbox file's current end, checks the overlap and appends at most room
// bytes after it.
func (l *Launcher) stepFile(ctx context.Context, c *agent.Client, lc *liveCopy, room int64) error {
	from := lc.size - int64(len(lc.overlap))
	remote := path.Join(DefaultMetaDir, lc.name)
	// "." (the workspace root) always exists: the agent reads the file
	// to its current end and ends the stream, rather than follow it on.
	err := c.Follow(ctx, []agent.FollowFile{{Path: remote, Offset: from}}, ".", func(_ int, off int64, data []byte) error {
		if lc.checked < len(lc.overlap) {
			n := min(len(data), len(lc.overlap)-lc.checked)
			if !bytes.Equal(data[:n], lc.overlap[lc.checked:lc.checked+n]) {
				return &divergedError{File: lc.name, HostSize: lc.size,
					Reason: fmt.Sprintf("its bytes from %d differ from the host's (rewritten, or truncated and regrown)", off)}
			}
			lc.checked += n
			data = data[n:]
			off += int64(n)
		}
		if len(data) == 0 {
			return nil
		}
		if off != lc.size {
			return fmt.Errorf("follow %s: data at %d, host copy ends at %d", lc.name, off, lc.size)
		}
		full := int64(len(data)) >= room
		if full {
			data = data[:max(room, 0)]
		}
		n, err := lc.f.WriteAt(data, lc.size)
		lc.size += int64(n)
		lc.touched = lc.touched || n > 0
		room -= int64(n)
		if err != nil {
			return fmt.Errorf("append to live copy %s: %w", lc.name, err)
		}
		if full {
			return errStepFull
		}
		return nil
	})
	switch {
	case errors.Is(err, agent.ErrShrunk):
		return &divergedError{File: lc.name, HostSize: lc.size, Reason: "the agent reports it truncated or replaced"}
	case err == nil && lc.checked < len(lc.overlap):
		// The stream read the file to its end: it is shorter than the
		// host's copy (or gone).
		return &divergedError{File: lc.name, HostSize: lc.size,
			Reason: fmt.Sprintf("it ends at %d, before the host's copy", from+int64(lc.checked))}
	}
	return err
}

// endLive is the end of a run's live copies, after the final pull: a copy
// the pull did not replace because the sandbox had no such file (it was
// removed) goes too, so that the run directory holds what the sandbox
// held. A failed pull leaves the copies: they are all there is.
func (l *Launcher) endLive(dir string, pres PullResult, pullErr error) {
	if l.cfg.LiveLogs.Off {
		return
	}
	st, err := readLiveState(dir)
	if err != nil {
		l.cfg.Logger.Warn("cannot read the live log state", "dir", dir, "err", err)
		return
	}
	if pullErr == nil || errors.Is(pullErr, ErrNoMeta) {
		for _, name := range pres.Missing {
			if f := st.Files[name]; f != nil && f.Appended {
				if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					l.cfg.Logger.Warn("cannot remove a live copy the sandbox no longer has", "file", name, "err", err)
				}
			}
		}
	}
	if err := os.Remove(filepath.Join(dir, liveStateFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		l.cfg.Logger.Warn("cannot remove the live log state", "dir", dir, "err", err)
	}
}
