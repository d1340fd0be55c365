package ocsf

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Class is ferry's grouping of OCSF event classes.
type Class string

const (
	// ClassNetwork is Network Activity [4001] and HTTP Activity [4002]:
	// the sandbox proxy's decisions on outbound connections and requests.
	ClassNetwork Class = "network"
	// ClassProcess is Process Activity [1007]: launches and exits.
	ClassProcess Class = "process"
	// ClassFinding is Detection Finding [2004].
	ClassFinding Class = "finding"
	// ClassOther is every other class (SSH Activity, Application
	// Lifecycle, Device Config State Change, API Activity, Base Event,
	// and classes this package does not know); Event.ClassUID says which.
	ClassOther Class = "other"
)

// Upstream's class_uid values (crates/openshell-ocsf/src/builders).
const (
	UIDBase          = 0
	UIDProcess       = 1007
	UIDFinding       = 2004
	UIDNetwork       = 4001
	UIDHTTP          = 4002
	UIDSSH           = 4007
	UIDConfig        = 5019
	UIDLifecycle     = 6002
	UIDAPI           = 6003
	maxKnownClassUID = 1 << 20
)

// ClassOf groups a class_uid.
func ClassOf(uid int) Class {
	switch uid {
	case UIDNetwork, UIDHTTP:
		return ClassNetwork
	case UIDProcess:
		return ClassProcess
	case UIDFinding:
		return ClassFinding
	}
	return ClassOther
}

// Decision is what the sandbox decided about the activity, when the event
// says: OCSF's action_id (Allowed 1, Denied 2) or, failing that, its
// disposition_id. Empty means the event does not say (a process event's
// shorthand never does).
type Decision string

const (
	Allowed Decision = "allowed"
	Denied  Decision = "denied"
)

// Endpoint is where an activity went.
type Endpoint struct {
	Host string `json:"host,omitempty"` // domain, else IP
	Port int    `json:"port,omitempty"`
	// Protocol is the transport (connection_info.protocol_name, "tcp") or,
	// for HTTP Activity, the URL's scheme.
	Protocol string `json:"protocol,omitempty"`
}

// Process is the process an event is about (Process Activity's process)
// or by (the actor of a network event).
type Process struct {
	Name    string `json:"name"` // as upstream names it: the binary, maybe a path
	PID     int64  `json:"pid"`
	CmdLine string `json:"cmd_line,omitempty"`
}

// Event is one OCSF event in ferry's normalized shape, with the upstream
// event it came from.
type Event struct {
	Class     Class  `json:"class"`
	ClassUID  int    `json:"class_uid"`
	ClassName string `json:"class_name,omitempty"`
	// Activity is upstream's activity name, lower case: "open", "refuse",
	// "launch", "terminate", "get" (an HTTP method), "blocked" (a
	// finding's disposition), ...
	Activity string    `json:"activity,omitempty"`
	Decision Decision  `json:"decision,omitempty"`
	Severity string    `json:"severity,omitempty"` // informational, low, medium, high, critical, fatal
	Time     time.Time `json:"time"`
	Dest     *Endpoint `json:"dest,omitempty"`
	Process  *Process  `json:"process,omitempty"`
	ExitCode *int      `json:"exit_code,omitempty"`
	URL      string    `json:"url,omitempty"`
	// Policy and Engine name the rule that decided (firewall_rule).
	Policy string `json:"policy,omitempty"`
	Engine string `json:"engine,omitempty"`
	// Reason is a decision's detail (status_detail), Message upstream's
	// message, Finding a finding's title and FindingType its uid.
	Reason      string `json:"reason,omitempty"`
	Message     string `json:"message,omitempty"`
	Finding     string `json:"finding,omitempty"`
	FindingType string `json:"finding_type,omitempty"`
	// Format is "shorthand" or "json": which form of the event arrived.
	Format string `json:"format"`
	// Raw is the event as it arrived: the shorthand line as a JSON
	// string, or the JSON object.
	Raw json.RawMessage `json:"raw"`
}

// Formats of Event.Format.
const (
	FormatShorthand = "shorthand"
	FormatJSON      = "json"
)

// ClassCount counts one class's events and their decisions.
type ClassCount struct {
	Total   int `json:"total"`
	Allowed int `json:"allowed"`
	Denied  int `json:"denied"`
}

// Counts sums events by class; it is what a run's summary line says.
type Counts struct {
	Network ClassCount `json:"network"`
	Process ClassCount `json:"process"`
	Finding ClassCount `json:"finding"`
	Other   ClassCount `json:"other"`
	// Skipped counts OCSF lines that could not be read (see Parse).
	Skipped int `json:"skipped"`
}

// Add counts e.
func (c *Counts) Add(e Event) {
	var cc *ClassCount
	switch e.Class {
	case ClassNetwork:
		cc = &c.Network
	case ClassProcess:
		cc = &c.Process
	case ClassFinding:
		cc = &c.Finding
	default:
		cc = &c.Other
	}
	cc.Total++
	switch e.Decision {
	case Allowed:
		cc.Allowed++
	case Denied:
		cc.Denied++
	}
}

// String is the one-line summary: "network 12 (3 denied), process 40,
// findings 0", with other classes and skipped lines only when there are
// some.
func (c Counts) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "network %d (%d denied), process %d, findings %d", c.Network.Total, c.Network.Denied, c.Process.Total, c.Finding.Total)
	if c.Other.Total > 0 {
		fmt.Fprintf(&b, ", other %d", c.Other.Total)
	}
	if c.Skipped > 0 {
		fmt.Fprintf(&b, "; %d unreadable line(s) skipped", c.Skipped)
	}
	return b.String()
}

// severityName maps upstream's severity_id to its name, lower case.
func severityName(id int) string {
	switch id {
	case 0:
		return "unknown"
	case 1:
		return "informational"
	case 2:
		return "low"
	case 3:
		return "medium"
	case 4:
		return "high"
	case 5:
		return "critical"
	case 6:
		return "fatal"
	}
	return "other"
}

// decisionOf maps action_id, then disposition_id, to a Decision.
func decisionOf(actionID, dispositionID int) Decision {
	switch actionID {
	case 1:
		return Allowed
	case 2:
		return Denied
	}
	return dispositionDecision(dispositionID)
}

// dispositionDecision maps OCSF disposition ids (enums/disposition.rs):
// Allowed 1 and Approved 8 allow; Blocked 2, Quarantined 3, Isolated 4,
// Deleted 5, Dropped 6, Rejected 25, Unauthorized 26 and AccessRevoked
// 24 deny; the rest (Detected, Logged, Alert...) decide nothing.
func dispositionDecision(id int) Decision {
	switch id {
	case 1, 8:
		return Allowed
	case 2, 3, 4, 5, 6, 24, 25, 26:
		return Denied
	}
	return ""
}
