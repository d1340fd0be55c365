package ocsf

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The shorthand grammar is upstream's format_shorthand
// (crates/openshell-ocsf/src/format/shorthand.rs, v0.0.111):
//
//	<PREFIX>[:<ACTIVITY>] <[SEV]> <class-specific detail> [tags]
//
// The detail is not escaped upstream (a reason or a command line may hold
// brackets), so the tags are found by their fixed names, outermost last,
// and a detail that fits no shape upstream writes becomes the event's
// message rather than a guessed destination.

var prefixUID = map[string]int{
	"NET":       UIDNetwork,
	"HTTP":      UIDHTTP,
	"SSH":       UIDSSH,
	"PROC":      UIDProcess,
	"FINDING":   UIDFinding,
	"LIFECYCLE": UIDLifecycle,
	"CONFIG":    UIDConfig,
	"API":       UIDAPI,
	"EVENT":     UIDBase,
}

var prefixName = map[int]string{
	UIDNetwork:   "Network Activity",
	UIDHTTP:      "HTTP Activity",
	UIDSSH:       "SSH Activity",
	UIDProcess:   "Process Activity",
	UIDFinding:   "Detection Finding",
	UIDLifecycle: "Application Lifecycle",
	UIDConfig:    "Device Config State Change",
	UIDAPI:       "API Activity",
	UIDBase:      "Base Event",
}

// severityTag is severity_tag's inverse; [INFO] also stands for
// upstream's Unknown and Other.
var severityTag = map[string]string{
	"[INFO]":  "informational",
	"[LOW]":   "low",
	"[MED]":   "medium",
	"[HIGH]":  "high",
	"[CRIT]":  "critical",
	"[FATAL]": "fatal",
}

// actionWord is ActionId's labels, upper case, as the shorthand shows them.
var actionWord = map[string]Decision{
	"ALLOWED":  Allowed,
	"DENIED":   Denied,
	"OBSERVED": "",
	"MODIFIED": "",
	"UNKNOWN":  "",
	"OTHER":    "",
}

var (
	procRE   = regexp.MustCompile(`^(.+)\((-?[0-9]{1,19})\)$`)
	policyRE = regexp.MustCompile(`\[policy:(\S*) engine:(\S*)\]`)
)

func parseShorthand(line string) (Event, error) {
	head, rest, _ := strings.Cut(line, " ")
	prefix, activity, _ := strings.Cut(head, ":")
	uid, ok := prefixUID[prefix]
	if !ok {
		return Event{}, fmt.Errorf("%w: unknown class %q", ErrMalformed, clipQuote(head))
	}
	sevTag, rest, _ := strings.Cut(rest, " ")
	sev, ok := severityTag[sevTag]
	if !ok {
		return Event{}, fmt.Errorf("%w: %s event without a severity tag", ErrMalformed, prefix)
	}
	e := Event{
		Class:     ClassOf(uid),
		ClassUID:  uid,
		ClassName: prefixName[uid],
		Activity:  strings.ToLower(activity),
		Severity:  sev,
		Format:    FormatShorthand,
		Raw:       rawString(line),
	}
	var err error
	switch uid {
	case UIDNetwork:
		parseNet(&e, rest)
	case UIDHTTP:
		parseHTTP(&e, rest)
	case UIDSSH:
		word, _, _ := strings.Cut(rest, " ")
		e.Decision = actionWord[word]
		e.Message = clip(rest)
	case UIDProcess:
		err = parseProc(&e, rest)
	case UIDFinding:
		err = parseFinding(&e, rest)
	default:
		e.Message = clip(rest)
	}
	if err != nil {
		return Event{}, err
	}
	return e, nil
}

// cutTag splits s at the first " [name:" (or a leading "[name:"): what
// precedes it, and the tag's text up to the last "]" of s.
func cutTag(s, name string) (before, tag string, ok bool) {
	open := "[" + name + ":"
	i := strings.Index(s, " "+open)
	skip := 1
	if strings.HasPrefix(s, open) {
		i, skip = 0, 0
	}
	if i < 0 {
		return s, "", false
	}
	tag = s[i+skip+len(open):]
	if j := strings.LastIndexByte(tag, ']'); j >= 0 {
		tag = tag[:j]
	}
	return s[:i], tag, true
}

// detail returns what precedes the first of the named tags.
func detail(s string, names ...string) string {
	for _, n := range names {
		s, _, _ = cutTag(s, n)
	}
	return s
}

// parseNet reads `ACTION actor(pid) -> host:port/proto [policy:P engine:E]
// [reason:R] [msg:M]`, every part optional.
func parseNet(e *Event, rest string) {
	main := detail(rest, "policy", "reason", "msg")
	if m := policyRE.FindStringSubmatch(rest); m != nil {
		e.Policy, e.Engine = clip(m[1]), clip(m[2])
	}
	withoutMsg, msg, hasMsg := cutTag(rest, "msg")
	if hasMsg {
		e.Message = clip(msg)
	}
	if _, reason, ok := cutTag(withoutMsg, "reason"); ok {
		e.Reason = clip(reason)
	}
	main = takeAction(e, main)
	actor, dst, arrow := strings.Cut(main, " -> ")
	if !arrow {
		actor, dst = "", main
		if procRE.MatchString(main) {
			actor, dst = main, ""
		}
	}
	if actor != "" {
		e.Process = parseProcess(actor)
	}
	if dst != "" {
		if strings.ContainsAny(dst, " \t") {
			// Not a destination upstream writes: keep it as text.
			if e.Message == "" {
				e.Message = clip(dst)
			}
		} else {
			e.Dest = parseHostPort(dst)
		}
	}
}

// takeAction strips a leading action word into e.Decision.
func takeAction(e *Event, s string) string {
	word, after, _ := strings.Cut(s, " ")
	if d, ok := actionWord[word]; ok {
		e.Decision = d
		return after
	}
	return s
}

// parseHostPort reads upstream's `host[:port][/protocol]`. An IPv6
// address is ambiguous in that form (upstream writes no brackets); its
// last group is taken as the port only when the whole has brackets or a
// single colon.
func parseHostPort(s string) *Endpoint {
	hostport, proto, _ := strings.Cut(s, "/")
	ep := &Endpoint{Host: hostport, Protocol: clip(proto)}
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && (strings.Count(hostport, ":") == 1 || strings.HasPrefix(hostport, "[")) {
		if p, err := strconv.ParseUint(hostport[i+1:], 10, 16); err == nil {
			ep.Host, ep.Port = strings.Trim(hostport[:i], "[]"), int(p)
		}
	}
	ep.Host = clip(ep.Host)
	return ep
}

// parseProcess reads `name(pid)`; a name without a pid is kept as is.
func parseProcess(s string) *Process {
	if m := procRE.FindStringSubmatch(s); m != nil {
		pid, err := strconv.ParseInt(m[2], 10, 64)
		if err == nil {
			return &Process{Name: clip(m[1]), PID: pid}
		}
	}
	return &Process{Name: clip(s)}
}

// parseHTTP reads `ACTION actor(pid) -> METHOD URL [policy:P engine:E]
// [k:v ... reason:R] [msg:M]`.
func parseHTTP(e *Event, rest string) {
	if m := policyRE.FindStringSubmatch(rest); m != nil {
		e.Policy, e.Engine = clip(m[1]), clip(m[2])
	}
	withoutMsg, msg, hasMsg := cutTag(rest, "msg")
	if hasMsg {
		e.Message = clip(msg)
	}
	if i := strings.Index(withoutMsg, " reason:"); i >= 0 && strings.HasSuffix(withoutMsg, "]") {
		e.Reason = clip(withoutMsg[i+len(" reason:") : len(withoutMsg)-1])
	} else if i := strings.Index(withoutMsg, "[reason:"); i >= 0 && strings.HasSuffix(withoutMsg, "]") {
		e.Reason = clip(withoutMsg[i+len("[reason:") : len(withoutMsg)-1])
	}
	main := takeAction(e, rest)
	if actor, after, ok := strings.Cut(main, " -> "); ok {
		e.Process = parseProcess(actor)
		main = after
	}
	// METHOD URL, then the tags.
	fields := strings.Fields(main)
	if len(fields) < 2 {
		return
	}
	e.URL = clip(fields[1])
	u, err := url.Parse(fields[1])
	if err != nil || u.Host == "" {
		return
	}
	ep := &Endpoint{Host: clip(u.Hostname()), Protocol: clip(u.Scheme)}
	if p, err := strconv.ParseUint(u.Port(), 10, 16); err == nil {
		ep.Port = int(p)
	} else {
		switch u.Scheme {
		case "http", "ws":
			ep.Port = 80
		case "https", "wss":
			ep.Port = 443
		}
	}
	e.Dest = ep
}

// parseProc reads `name(pid) [exit:N] [cmd:C]`.
func parseProc(e *Event, rest string) error {
	before, cmd, hasCmd := cutTag(rest, "cmd")
	proc, exit, hasExit := cutTag(before, "exit")
	if !procRE.MatchString(proc) {
		return fmt.Errorf("%w: process event without name(pid)", ErrMalformed)
	}
	e.Process = parseProcess(proc)
	if hasCmd {
		e.Process.CmdLine = clip(cmd)
	}
	if hasExit {
		code, err := strconv.ParseInt(exit, 10, 32)
		if err != nil {
			return fmt.Errorf("%w: exit code %q", ErrMalformed, clipQuote(exit))
		}
		c := int(code)
		e.ExitCode = &c
	}
	return nil
}

// findingDecision maps a finding's disposition label (DispositionId's
// label, upper case) to a decision; see dispositionDecision.
var findingDecision = map[string]Decision{
	"ALLOWED": Allowed, "APPROVED": Allowed,
	"BLOCKED": Denied, "QUARANTINED": Denied, "ISOLATED": Denied, "DELETED": Denied,
	"DROPPED": Denied, "REJECTED": Denied, "UNAUTHORIZED": Denied, "ACCESS REVOKED": Denied,
}

// parseFinding reads `"title" [type:UID k:v ... confidence:C]`; the
// activity is the disposition.
func parseFinding(e *Event, rest string) error {
	title, after, err := unquote(rest)
	if err != nil {
		return err
	}
	e.Finding = clip(title)
	e.Decision = findingDecision[strings.ToUpper(e.Activity)]
	if ctx, ok := strings.CutPrefix(strings.TrimSpace(after), "[type:"); ok {
		uid, _, _ := strings.Cut(ctx, " ")
		e.FindingType = clip(strings.TrimSuffix(uid, "]"))
	}
	return nil
}

// unquote reads the quoted field escape_quoted_field writes at the start
// of s, and returns what follows it.
func unquote(s string) (string, string, error) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", fmt.Errorf("%w: finding without a quoted title", ErrMalformed)
	}
	var b strings.Builder
	for i := 1; i < len(s); {
		c := s[i]
		switch {
		case c == '"':
			return b.String(), s[i+1:], nil
		case c != '\\':
			r, n := utf8.DecodeRuneInString(s[i:])
			b.WriteRune(r)
			i += n
			continue
		}
		if i+1 >= len(s) {
			break
		}
		switch s[i+1] {
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case '\\', '"':
			b.WriteByte(s[i+1])
		case 'u': // \u{hex}
			end := strings.IndexByte(s[i:], '}')
			if !strings.HasPrefix(s[i+2:], "{") || end < 0 {
				return "", "", fmt.Errorf("%w: bad escape in finding title", ErrMalformed)
			}
			v, err := strconv.ParseUint(s[i+3:i+end], 16, 32)
			if err != nil || !utf8.ValidRune(rune(v)) {
				return "", "", fmt.Errorf("%w: bad escape in finding title", ErrMalformed)
			}
			b.WriteRune(rune(v))
			i += end + 1
			continue
		default:
			return "", "", fmt.Errorf("%w: bad escape in finding title", ErrMalformed)
		}
		i += 2
	}
	return "", "", fmt.Errorf("%w: unterminated finding title", ErrMalformed)
}

// clipQuote shortens untrusted text for an error message.
func clipQuote(s string) string {
	if len(s) > 64 {
		cut := 64
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return s[:cut] + "..."
	}
	return s
}
