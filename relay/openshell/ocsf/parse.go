package ocsf

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

const (
	// MaxLineBytes bounds one event line. Upstream's longest shorthand
	// is a few KiB (a reason is cut at 256 bytes, a message at 120); a
	// full JSON event rarely passes 4 KiB.
	MaxLineBytes = 64 << 10
	// MaxFieldBytes clips one normalized field (a process's command line).
	MaxFieldBytes = 4 << 10
	// MaxEvents bounds how many events Collect keeps; the lines past it
	// are counted as skipped.
	MaxEvents = 100_000
)

var (
	// ErrNotEvent is a log line that carries no OCSF event (plain
	// tracing, the gateway's own records): not an error of the log.
	ErrNotEvent = errors.New("ocsf: not an event")
	// ErrMalformed is an OCSF line this package cannot read: an unknown
	// class prefix, no severity, JSON of the wrong shape or types.
	ErrMalformed = errors.New("ocsf: malformed event")
	// ErrTooLarge is an OCSF line over MaxLineBytes.
	ErrTooLarge = errors.New("ocsf: event too large")
)

// Line is one sandbox log record, as GetSandboxLogs serves it.
type Line struct {
	Time    time.Time
	Level   string
	Target  string
	Source  string
	Message string
}

// Target and level upstream's LogPushLayer gives an OCSF event
// (crates/openshell-supervisor-process/src/log_push.rs).
const (
	EventLevel  = "OCSF"
	EventTarget = "ocsf"
)

// IsEvent reports whether l is an OCSF event line: upstream gives those
// level "OCSF" and target "ocsf".
func IsEvent(l Line) bool {
	return strings.EqualFold(l.Level, EventLevel) || l.Target == EventTarget
}

// Parse reads the event in l: ErrNotEvent for a line that is not an OCSF
// event, an error wrapping ErrTooLarge or ErrMalformed for one that cannot
// be read. A shorthand event takes its time from the line (upstream
// stamps the push); a JSON event from its own "time", else the line's.
func Parse(l Line) (Event, error) {
	if !IsEvent(l) {
		return Event{}, ErrNotEvent
	}
	msg := l.Message
	if len(msg) > MaxLineBytes {
		return Event{}, fmt.Errorf("%w: %d bytes, over %d", ErrTooLarge, len(msg), MaxLineBytes)
	}
	if !utf8.ValidString(msg) {
		return Event{}, fmt.Errorf("%w: not UTF-8", ErrMalformed)
	}
	trimmed := strings.TrimSpace(msg)
	var (
		e   Event
		err error
	)
	if strings.HasPrefix(trimmed, "{") {
		e, err = parseJSON([]byte(trimmed))
	} else {
		e, err = parseShorthand(trimmed)
	}
	if err != nil {
		return Event{}, err
	}
	if e.Time.IsZero() {
		e.Time = l.Time
	}
	e.Time = e.Time.UTC()
	return e, nil
}

// Set is what Collect read from a log.
type Set struct {
	Events []Event
	Counts Counts
	// Skips are the first few reasons lines were skipped, for a human.
	Skips []string
}

const maxSkips = 8

// Collect parses every event line of lines, oldest first; lines that are
// no event are left out silently, unreadable event lines are counted in
// Counts.Skipped, and so are the lines past MaxEvents.
func Collect(lines []Line) Set {
	var s Set
	for i, l := range lines {
		e, err := Parse(l)
		if errors.Is(err, ErrNotEvent) {
			continue
		}
		if err == nil && len(s.Events) >= MaxEvents {
			err = fmt.Errorf("%w: over %d events", ErrTooLarge, MaxEvents)
		}
		if err != nil {
			s.Counts.Skipped++
			if len(s.Skips) < maxSkips {
				s.Skips = append(s.Skips, fmt.Sprintf("line %d: %v", i+1, err))
			}
			continue
		}
		s.Events = append(s.Events, e)
		s.Counts.Add(e)
	}
	return s
}

// clip keeps s within MaxFieldBytes on a rune boundary.
func clip(s string) string {
	if len(s) <= MaxFieldBytes {
		return s
	}
	cut := MaxFieldBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// rawString is s as a JSON string.
func rawString(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}
