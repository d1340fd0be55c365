package ferry

import (
	"context"
	"time"
)

// Events writes the OCSF events of h's sandbox, from the gateway's log,
// into h's run directory as ocsf.ndjson (see WriteEvents) and returns
// what it wrote (a finished run's finish wrote them already, and Events
// returns what it wrote, also once the run is removed): every event the gateway keeps for that sandbox, which a
// Launcher makes for this run alone. LauncherConfig.Sandboxes gives the
// log when it is a LogSource (*openshell.Client is one); otherwise, or
// when the log cannot be read, the events are EventsUnavailable with the
// reason. A handle the index does not know is ErrUnknownRun.
func (l *Launcher) Events(ctx context.Context, h Handle) (EventsResult, error) {
	dir, err := l.runOf(h)
	if err != nil {
		return EventsResult{}, err
	}
	// A finished run's events were written by its finish; its sandbox
	// may be gone since.
	if rec, _ := readRecord(dir); rec != nil && rec.Finished && rec.Events != nil {
		return *rec.Events, nil
	}
	src, _ := l.cfg.Sandboxes.(LogSource)
	return WriteEvents(ctx, src, SandboxName(h), dir, time.Time{}), nil
}
