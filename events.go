package ferry

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ferry-dev/ferry/ocsf"
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
	if src == nil {
		return unavailable(ErrNoLogSource), nil, ErrNoLogSource
	}
	lines, err := src.SandboxLogs(ctx, sandbox)
	if err != nil {
		err = fmt.Errorf("read the log of %s: %w", sandbox, err)
		return unavailable(err), nil, err
	}
	in := make([]ocsf.Line, 0, len(lines))
	for _, l := range lines {
		if !since.IsZero() && l.Time.Before(since) {
			continue
		}
		in = append(in, ocsf.Line{Time: l.Time, Level: l.Level, Target: l.Target, Source: l.Source, Message: l.Message})
	}
	set := ocsf.Collect(in)
	return EventsResult{State: EventsObserved, Counts: &set.Counts, Summary: set.Counts.String(), Skips: set.Skips}, set.Events, nil
}

// WriteEvents is Events, then the events into out/ocsf.ndjson (mode
// 0600, replaced atomically). When the events are unavailable, a stale
// ocsf.ndjson in out is removed, so that no earlier run's events pass
// for this one's, and the result says why; it never fails otherwise
// than through the result.
func WriteEvents(ctx context.Context, src LogSource, sandbox, out string, since time.Time) EventsResult {
	path := filepath.Join(out, EventsFile)
	res, evs, err := Events(ctx, src, sandbox, since)
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
