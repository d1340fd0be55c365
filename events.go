package ferry

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/openshell/ocsf"
)

// EventsFile is the name of the events artifact in a run's output
// directory: one JSON ocsf.Event a line, oldest first.
const EventsFile = "ocsf.ndjson"

// ErrNoLogSource is a run or a read without a gateway log: a direct SSH
// channel has none.
var ErrNoLogSource = errors.New("ferry: no gateway log to read events from (a direct SSH channel has none)")

// States of EventsResult.State. "unavailable" is not "no events": the
// sandbox's log could not be read, so nothing is known of what happened.
const (
	EventsObserved    = "observed"
	EventsUnavailable = "unavailable"
)

// EventsSkew is how far before a run's start ferry still takes an event
// as the run's: the gateway and the sandbox stamp events with their own
// clocks. An event of another exec within that second before the run
// counts as the run's.
const EventsSkew = time.Second

// EventsResult says what ferry learnt of a sandbox's OCSF events, in the
// shape `ferry run --json` and `ferry sandbox events --json` print.
type EventsResult struct {
	State string `json:"state"`
	// Reason says why the events are unavailable.
	Reason string `json:"reason,omitempty"`
	// Path is the ocsf.ndjson written, if any.
	Path string `json:"path,omitempty"`
	// Counts is nil when the events are unavailable.
	Counts *ocsf.Counts `json:"counts,omitempty"`
	// Summary is the one line a human reads: "network 12 (3 denied),
	// process 40, findings 0" or "events unavailable: REASON".
	Summary string `json:"summary"`
	// Skips are the first reasons unreadable lines were skipped.
	Skips []string `json:"skips,omitempty"`
	// Followed: the log was followed live for the whole run (ferry run
	// through a gateway), so no event fell out of the bounded tail the
	// gateway keeps; without it a long run's first events may be gone.
	Followed bool `json:"followed,omitempty"`
	// Notes say what may be missing: a follow that ended early or
	// dropped records, a tail unread after a whole follow.
	Notes []string `json:"notes,omitempty"`
}

func unavailable(err error) EventsResult {
	return EventsResult{State: EventsUnavailable, Reason: err.Error(), Summary: "events unavailable: " + err.Error()}
}

// Events reads the OCSF events of the sandbox from its gateway log,
// oldest first, leaving out those stamped before since (zero: none left
// out). The result's State is EventsUnavailable, with the reason, when
// src is nil or the log cannot be read; the error is then that reason.
// The gateway keeps a bounded tail of each sandbox's log (upstream: the
// newest 2000 records), so a long run's first events may be gone.
func Events(ctx context.Context, src LogSource, sandbox string, since time.Time) (EventsResult, []ocsf.Event, error) {
	return events(ctx, src, sandbox, since, nil)
}

// events is Events over what f followed too: a tail that cannot be read
// after a whole follow still gives the followed events, with a note.
func events(ctx context.Context, src LogSource, sandbox string, since time.Time, f *eventFollow) (EventsResult, []ocsf.Event, error) {
	if src == nil {
		return unavailable(ErrNoLogSource), nil, ErrNoLogSource
	}
	followed, notes := f.stop()
	whole := f != nil && len(notes) == 0
	lines, err := src.SandboxLogs(ctx, sandbox)
	if err != nil {
		err = fmt.Errorf("read the log of %s: %w", sandbox, err)
		if !whole {
			return unavailable(err), nil, err
		}
		notes = append(notes, "the log's tail after the follow: "+err.Error())
	}
	lines = mergeLines(followed, lines)
	in := make([]ocsf.Line, 0, len(lines))
	for _, l := range lines {
		if !since.IsZero() && l.Time.Before(since) {
			continue
		}
		in = append(in, ocsf.Line{Time: l.Time, Level: l.Level, Target: l.Target, Source: l.Source, Message: l.Message})
	}
	set := ocsf.Collect(in)
	return EventsResult{State: EventsObserved, Counts: &set.Counts, Summary: set.Counts.String(), Skips: set.Skips, Followed: whole, Notes: notes}, set.Events, nil
}

// WriteEvents is Events, then the events into out/ocsf.ndjson (mode
// 0600, replaced atomically). When the events are unavailable, a stale
// ocsf.ndjson in out is removed, so that no earlier run's events pass
// for this one's, and the result says why; it never fails otherwise
// than through the result.
func WriteEvents(ctx context.Context, src LogSource, sandbox, out string, since time.Time) EventsResult {
	return writeEvents(ctx, src, sandbox, out, since, nil)
}

func writeEvents(ctx context.Context, src LogSource, sandbox, out string, since time.Time, f *eventFollow) EventsResult {
	path := filepath.Join(out, EventsFile)
	res, evs, err := events(ctx, src, sandbox, since, f)
	if err == nil {
		err = writeAtomic(path, func(w *bufio.Writer) error {
			enc := json.NewEncoder(w)
			for _, e := range evs {
				if err := enc.Encode(e); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			res = unavailable(fmt.Errorf("write %s: %w", path, err))
		}
	}
	if res.State != EventsObserved {
		if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			res.Reason += fmt.Sprintf(" (and a stale %s could not be removed: %v)", path, rerr)
		}
		return res
	}
	res.Path = path
	return res
}

// LogFollower is a LogSource that also streams the log as it grows
// (*openshell.Client is one): a run follows its sandbox's log while the
// command runs, so that no event of a long run falls out of the tail the
// gateway keeps before the log is read.
type LogFollower interface {
	LogSource
	FollowLogs(ctx context.Context, sandbox string, since time.Time, fn func(openshell.LogLine), warn func(string)) error
}

// eventFollow is a run's follow of its sandbox's OCSF events.
type eventFollow struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	lines []openshell.LogLine
	// dropped counts event lines past ocsf.MaxEvents; warnings are the
	// gateway's (a lagged stream dropped records); err is how the
	// follow ended before it was stopped.
	dropped  int
	bytes    int // of the kept lines' messages
	warnings []string
	err      error
}

// followEvents starts following src's log of sandbox from since; nil
// when src cannot follow.
func followEvents(ctx context.Context, src LogSource, sandbox string, since time.Time) *eventFollow {
	lf, ok := src.(LogFollower)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &eventFollow{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		err := lf.FollowLogs(ctx, sandbox, since, func(l openshell.LogLine) {
			if !ocsf.IsEvent(ocsf.Line{Level: l.Level, Target: l.Target}) {
				return
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.lines) >= ocsf.MaxEvents || f.bytes+len(l.Message) > maxFollowBytes {
				f.dropped++
				return
			}
			f.bytes += len(l.Message)
			f.lines = append(f.lines, l)
		}, func(w string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.warnings) < maxSkipsShown {
				f.warnings = append(f.warnings, w)
			}
		})
		f.mu.Lock()
		f.err = err
		f.mu.Unlock()
	}()
	return f
}

// maxFollowBytes bounds the event lines a follow keeps, however many
// and however long the lines the sandbox makes the gateway stream.
const maxFollowBytes = 64 << 20

// maxSkipsShown bounds the follow's warnings kept for the result.
const maxSkipsShown = 8

// stop ends the follow and returns what it saw. A nil follow saw
// nothing.
func (f *eventFollow) stop() (lines []openshell.LogLine, notes []string) {
	if f == nil {
		return nil, nil
	}
	f.cancel()
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	notes = append(notes, f.warnings...)
	if f.err != nil {
		notes = append(notes, "live follow ended early: "+f.err.Error())
	}
	if f.dropped > 0 {
		notes = append(notes, fmt.Sprintf("live follow kept the first %d events (%d bytes), %d more dropped", len(f.lines), f.bytes, f.dropped))
	}
	return f.lines, notes
}

// mergeLines is the union of two reads of one log, each record once,
// oldest first: the follow saw what the tail may have lost, the tail
// what came after the follow stopped.
func mergeLines(followed, tail []openshell.LogLine) []openshell.LogLine {
	if len(followed) == 0 {
		return tail
	}
	type key struct {
		ms                             int64
		level, target, source, message string
	}
	seen := make(map[key]bool, len(followed))
	out := make([]openshell.LogLine, 0, len(followed)+len(tail))
	for _, ls := range [][]openshell.LogLine{followed, tail} {
		for _, l := range ls {
			k := key{l.Time.UnixMilli(), l.Level, l.Target, l.Source, l.Message}
			if seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, l)
		}
	}
	slices.SortStableFunc(out, func(a, b openshell.LogLine) int { return a.Time.Compare(b.Time) })
	return out
}
