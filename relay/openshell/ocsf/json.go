package ocsf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// jsonEvent is the part of upstream's OCSF JSON (OcsfEvent's Serialize,
// crates/openshell-ocsf/src/events) that ferry reads. Unknown fields are
// ignored; a known field of the wrong type makes the event malformed, as
// it would for upstream's serde.
type jsonEvent struct {
	ClassUID      *int          `json:"class_uid"`
	ClassName     string        `json:"class_name"`
	ActivityName  string        `json:"activity_name"`
	Time          int64         `json:"time"`
	SeverityID    int           `json:"severity_id"`
	ActionID      int           `json:"action_id"`
	DispositionID int           `json:"disposition_id"`
	Disposition   string        `json:"disposition"`
	StatusDetail  string        `json:"status_detail"`
	Message       string        `json:"message"`
	DstEndpoint   *jsonEndpoint `json:"dst_endpoint"`
	Connection    *struct {
		Protocol string `json:"protocol_name"`
	} `json:"connection_info"`
	Actor *struct {
		Process *jsonProcess `json:"process"`
	} `json:"actor"`
	Process      *jsonProcess `json:"process"`
	ExitCode     *int         `json:"exit_code"`
	FirewallRule *struct {
		Name string `json:"name"`
		Type string `json:"type"`
	} `json:"firewall_rule"`
	FindingInfo *struct {
		UID   string `json:"uid"`
		Title string `json:"title"`
	} `json:"finding_info"`
	HTTPRequest *struct {
		Method string `json:"http_method"`
		URL    *struct {
			Scheme   string `json:"scheme"`
			Hostname string `json:"hostname"`
			Path     string `json:"path"`
			Port     int    `json:"port"`
		} `json:"url"`
	} `json:"http_request"`
}

type jsonEndpoint struct {
	Domain string `json:"domain"`
	IP     string `json:"ip"`
	Port   int    `json:"port"`
}

type jsonProcess struct {
	Name    string `json:"name"`
	PID     int64  `json:"pid"`
	CmdLine string `json:"cmd_line"`
}

func parseJSON(b []byte) (Event, error) {
	var j jsonEvent
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&j); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if dec.More() {
		return Event{}, fmt.Errorf("%w: data after the event", ErrMalformed)
	}
	if j.ClassUID == nil {
		return Event{}, fmt.Errorf("%w: JSON event without class_uid", ErrMalformed)
	}
	uid := *j.ClassUID
	if uid < 0 || uid > maxKnownClassUID {
		return Event{}, fmt.Errorf("%w: class_uid %d", ErrMalformed, uid)
	}
	var raw bytes.Buffer
	if err := json.Compact(&raw, b); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	e := Event{
		Class:     ClassOf(uid),
		ClassUID:  uid,
		ClassName: clip(j.ClassName),
		Activity:  clip(strings.ToLower(j.ActivityName)),
		Decision:  decisionOf(j.ActionID, j.DispositionID),
		Severity:  severityName(j.SeverityID),
		Reason:    clip(j.StatusDetail),
		Message:   clip(j.Message),
		ExitCode:  j.ExitCode,
		Format:    FormatJSON,
		Raw:       raw.Bytes(),
	}
	if j.Time > 0 && j.Time < 1<<53 {
		e.Time = time.UnixMilli(j.Time)
	}
	if uid == UIDFinding && j.Disposition != "" {
		e.Activity = clip(strings.ToLower(j.Disposition))
	}
	if ep := j.DstEndpoint; ep != nil {
		host := ep.Domain
		if host == "" {
			host = ep.IP
		}
		e.Dest = &Endpoint{Host: clip(host), Port: ep.Port}
		if j.Connection != nil {
			e.Dest.Protocol = clip(j.Connection.Protocol)
		}
	}
	if r := j.HTTPRequest; r != nil {
		if e.Activity == "" || e.Activity == "other" {
			e.Activity = clip(strings.ToLower(r.Method))
		}
		if u := r.URL; u != nil {
			port := u.Port
			if port == 0 {
				port = map[string]int{"http": 80, "https": 443, "ws": 80, "wss": 443}[u.Scheme]
			}
			if e.Dest == nil {
				e.Dest = &Endpoint{Host: clip(u.Hostname), Port: port, Protocol: clip(u.Scheme)}
			}
			e.URL = clip(u.Scheme + "://" + u.Hostname + portSuffix(u.Scheme, u.Port) + u.Path)
		}
	}
	switch {
	case j.Process != nil:
		e.Process = j.Process.normalized()
	case j.Actor != nil && j.Actor.Process != nil:
		e.Process = j.Actor.Process.normalized()
	}
	if r := j.FirewallRule; r != nil {
		e.Policy, e.Engine = clip(r.Name), clip(r.Type)
	}
	if f := j.FindingInfo; f != nil {
		e.Finding, e.FindingType = clip(f.Title), clip(f.UID)
	}
	return e, nil
}

func (p *jsonProcess) normalized() *Process {
	return &Process{Name: clip(p.Name), PID: p.PID, CmdLine: clip(p.CmdLine)}
}

// portSuffix is Url::to_display_string's port: shown unless the scheme's
// default.
func portSuffix(scheme string, port int) string {
	if port == 0 || (scheme == "http" && port == 80) || (scheme == "https" && port == 443) {
		return ""
	}
	return ":" + strconv.Itoa(port)
}
