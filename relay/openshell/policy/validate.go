package policy

import (
	"fmt"
	"net"
	"sort"
	"strings"

	sandboxv1 "github.com/ferry-dev/ferry/proto/openshell/sandbox/v1"
)

// Upstream's policy limits (openshell-policy's validate_sandbox_policy).
const (
	maxFilesystemPaths  = 256 // read_only and read_write together
	maxPolicyPathLen    = 4096
	maxMiddlewares      = 10
	maxSelectorPatterns = 32
	// ProviderRulePrefix marks the network rules a gateway composes from
	// a sandbox's providers; a client may not write them.
	ProviderRulePrefix = "_provider_"
	// The sandbox identities a policy may name besides "sandbox": any UID
	// or GID but root's and the invalid-id sentinel.
	minSandboxID = 1
	maxSandboxID = 1<<32 - 2
)

// Violation is one thing upstream's gateway refuses in a policy.
type Violation struct {
	// Key is the YAML key at fault, dotted: "process.run_as_user",
	// "network_policies.github.endpoints[0]".
	Key string
	// Line is Key's line in the file it was parsed from; 0 when the
	// policy did not come from a file.
	Line int
	// Msg is upstream's message, word for word.
	Msg string
}

func (v Violation) String() string {
	if v.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", v.Line, v.Key, v.Msg)
	}
	return v.Msg
}

// UnsafeError is a policy upstream's gateway refuses as unsafe. Without
// lines its message is upstream's exactly.
type UnsafeError struct {
	Violations []Violation
}

func (e *UnsafeError) Error() string {
	s := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		s[i] = v.String()
	}
	return "policy contains unsafe content: " + strings.Join(s, "; ")
}

// ReservedKeyError is a network_policies key that only a gateway may
// write.
type ReservedKeyError struct {
	Key  string
	Line int
}

func (e *ReservedKeyError) Error() string {
	msg := fmt.Sprintf("network_policies key '%s' uses reserved '%s' prefix for provider composition; use 'openshell policy get <sandbox> --base' for a round-trippable base policy, or use 'openshell policy get <sandbox> --full' to inspect the effective policy including provider entries", e.Key, ProviderRulePrefix)
	if e.Line > 0 {
		return fmt.Sprintf("line %d: network_policies.%s: %s", e.Line, e.Key, msg)
	}
	return msg
}

// Validate refuses what upstream's gateway refuses at CreateSandbox, in
// its order and words: a reserved rule key (*ReservedKeyError) first, then
// every unsafe entry at once (*UnsafeError). A nil policy is valid: the
// gateway then applies its own.
func Validate(p *sandboxv1.SandboxPolicy) error {
	if p == nil {
		return nil
	}
	for _, k := range sortedKeys(p.GetNetworkPolicies()) {
		if strings.HasPrefix(k, ProviderRulePrefix) {
			return &ReservedKeyError{Key: k}
		}
	}
	if v := violations(p); len(v) > 0 {
		return &UnsafeError{Violations: v}
	}
	return nil
}

// violations lists everything unsafe in p, in upstream's order and words.
func violations(p *sandboxv1.SandboxPolicy) []Violation {
	var v []Violation
	add := func(key, format string, a ...any) { v = append(v, Violation{Key: key, Msg: fmt.Sprintf(format, a...)}) }

	if pr := p.GetProcess(); pr != nil {
		for _, f := range []struct{ name, value string }{{"run_as_user", pr.GetRunAsUser()}, {"run_as_group", pr.GetRunAsGroup()}} {
			if f.value != "" && !validSandboxIdentity(f.value) {
				add("process."+f.name, "%s must be 'sandbox' or a numeric UID/GID in range [%d, %d], got '%s'", f.name, minSandboxID, maxSandboxID, f.value)
			}
		}
	}

	if fs := p.GetFilesystem(); fs != nil {
		if n := len(fs.GetReadOnly()) + len(fs.GetReadWrite()); n > maxFilesystemPaths {
			add("filesystem_policy", "too many filesystem paths (%d > %d)", n, maxFilesystemPaths)
		}
		type entry struct{ key, path string }
		var all []entry
		for i, path := range fs.GetReadOnly() {
			all = append(all, entry{fmt.Sprintf("filesystem_policy.read_only[%d]", i), path})
		}
		for i, path := range fs.GetReadWrite() {
			all = append(all, entry{fmt.Sprintf("filesystem_policy.read_write[%d]", i), path})
		}
		for _, e := range all {
			if len(e.path) > maxPolicyPathLen {
				add(e.key, "path exceeds maximum length (%d > %d): %s", len(e.path), maxPolicyPathLen, truncateForDisplay(e.path))
				continue
			}
			if !strings.HasPrefix(e.path, "/") {
				add(e.key, "path must be absolute (start with '/'): %s", e.path)
			}
			if hasParentDir(e.path) {
				add(e.key, "path contains '..' traversal component: %s", e.path)
			}
		}
		for i, path := range fs.GetReadWrite() {
			if strings.TrimRight(path, "/") == "" {
				add(fmt.Sprintf("filesystem_policy.read_write[%d]", i), "read-write path is overly broad: %s", path)
			}
		}
	}

	for _, k := range sortedKeys(p.GetNetworkPolicies()) {
		rule := p.GetNetworkPolicies()[k]
		name := rule.GetName()
		if name == "" {
			name = k
		}
		for i, ep := range rule.GetEndpoints() {
			key := fmt.Sprintf("network_policies.%s.endpoints[%d]", k, i)
			for _, msg := range endpointViolations(name, ep) {
				v = append(v, Violation{Key: key, Msg: msg})
			}
		}
	}

	return append(v, middlewareViolations(p)...)
}

func endpointViolations(name string, ep *sandboxv1.NetworkEndpoint) []string {
	var v []string
	add := func(format string, a ...any) { v = append(v, fmt.Sprintf(format, a...)) }
	host := ep.GetHost()
	tcp := strings.EqualFold(ep.GetProtocol(), "tcp")
	switch {
	case strings.TrimSpace(host) == "" && tcp:
		add("network policy '%s': protocol tcp requires a DNS hostname; hostless allowed_ips endpoints are supported only by the forward proxy", name)
	case strings.TrimSpace(host) == "" && len(ep.GetAllowedIps()) == 0:
		add("network policy '%s': endpoint host must not be empty unless allowed_ips constrains a non-TCP proxy endpoint", name)
	case tcp && net.ParseIP(host) != nil:
		add("network policy '%s': protocol tcp endpoint '%s' must use a DNS hostname, not an IP literal; direct IP connections bypass policy DNS and are blocked", name, host)
	case tcp:
		if reason := tcpHostProblem(host); reason != "" {
			add("network policy '%s': protocol tcp endpoint has invalid DNS host selector '%s': %s", name, host, reason)
		}
	}
	ports := ep.GetPorts()
	if len(ports) == 0 && ep.GetPort() != 0 {
		ports = []uint32{ep.GetPort()}
	}
	if len(ports) == 0 {
		add("network policy '%s': endpoint '%s' must declare at least one port", name, host)
	}
	for _, port := range ports {
		if port < 1 || port > 65535 {
			add("network policy '%s': endpoint '%s' has invalid port %d; expected 1..=65535", name, host, port)
		}
	}
	if strings.HasPrefix(host, "*.") || strings.HasPrefix(host, "**.") {
		if len(strings.Split(host, ".")) <= 2 {
			add("network policy '%s': TLD wildcard '%s' is not allowed; use subdomain wildcards like '*.example.com' instead", name, host)
		}
	}
	if wildcardShapeInvalid(host) {
		add("network policy '%s': invalid host wildcard '%s'; middle DNS label wildcards must be the entire label '*' and recursive '**' is only allowed as the entire first label", name, host)
	}
	signing := ep.GetCredentialSigning()
	if signing != "" && signing != "sigv4" && signing != "sigv4:body" && signing != "sigv4:no_body" {
		add("network policy '%s': endpoint '%s' has unrecognized credential_signing value '%s' (expected sigv4, sigv4:body, or sigv4:no_body)", name, host, signing)
	}
	if signing != "" && ep.GetSigningService() == "" {
		add("network policy '%s': endpoint '%s' has credential_signing set but signing_service is empty", name, host)
	}
	if signing != "" && ep.GetRequestBodyCredentialRewrite() {
		add("network policy '%s': endpoint '%s' has both credential_signing and request_body_credential_rewrite set; these options are mutually exclusive", name, host)
	}
	return v
}

// middlewareViolations checks the structure of p's middleware configs.
func middlewareViolations(p *sandboxv1.SandboxPolicy) []Violation {
	var v []Violation
	add := func(key, format string, a ...any) { v = append(v, Violation{Key: key, Msg: fmt.Sprintf(format, a...)}) }
	mws := p.GetNetworkMiddlewares()
	if len(mws) > maxMiddlewares {
		add("network_middlewares", "too many middleware configs (%d > %d)", len(mws), maxMiddlewares)
	}
	orders := map[int32]string{}
	for _, name := range sortedKeys(mws) {
		mw := mws[name]
		key := "network_middlewares." + name
		invalid := func(reason string) { add(key, "middleware config '%s' is invalid: %s", name, reason) }
		if name == "" {
			invalid("name must not be empty")
		}
		if first, ok := orders[mw.GetOrder()]; ok {
			add(key, "middleware configs '%s' and '%s' use duplicate order %d", first, name, mw.GetOrder())
		}
		orders[mw.GetOrder()] = name
		if mw.GetMiddleware() == "" {
			invalid("middleware must not be empty")
		}
		switch mw.GetOnError() {
		case "", "fail_closed", "fail_open":
		default:
			invalid(fmt.Sprintf("invalid on_error '%s'", mw.GetOnError()))
		}
		sel := mw.GetEndpoints()
		if sel == nil {
			invalid("endpoint selector is required")
			continue
		}
		if len(sel.GetInclude()) == 0 {
			invalid("endpoint selector must include at least one host pattern")
		}
		if n := len(sel.GetInclude()) + len(sel.GetExclude()); n > maxSelectorPatterns {
			add(key, "middleware config '%s' has too many selector patterns (%d > %d)", name, n, maxSelectorPatterns)
		}
	}
	return v
}

// validSandboxIdentity reports whether a run_as_user or run_as_group
// value is "sandbox" or a numeric id other than root's.
func validSandboxIdentity(s string) bool {
	if s == "sandbox" {
		return true
	}
	var n uint64
	if s == "" || len(s) > 10 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + uint64(c-'0')
	}
	return n >= minSandboxID && n <= maxSandboxID
}

// hasParentDir reports whether path has a ".." component.
func hasParentDir(path string) bool {
	for _, c := range strings.Split(path, "/") {
		if c == ".." {
			return true
		}
	}
	return false
}

func wildcardShapeInvalid(host string) bool {
	if host == "*" || host == "**" {
		return true
	}
	if !strings.Contains(host, "*") {
		return false
	}
	labels := strings.Split(host, ".")
	if strings.Contains(labels[0], "**") && labels[0] != "**" {
		return true
	}
	for _, l := range labels[1:] {
		if strings.Contains(l, "**") || (strings.Contains(l, "*") && l != "*") {
			return true
		}
	}
	return false
}

// tcpHostProblem is why an explicit-TCP host selector cannot become a DNS
// name, or "".
func tcpHostProblem(host string) string {
	if strings.TrimSpace(host) != host {
		return "leading or trailing whitespace is not allowed"
	}
	if strings.HasSuffix(host, ".") {
		return "omit the trailing DNS root dot"
	}
	if len(host)+1 > 255 {
		return "selector cannot represent a valid DNS name: name too long"
	}
	for _, l := range strings.Split(host, ".") {
		if l == "" || len(l) > 63 {
			return "selector cannot represent a valid DNS name: malformed label"
		}
	}
	return ""
}

// truncateForDisplay shortens s to 80 bytes for an error message, on a
// UTF-8 boundary.
func truncateForDisplay(s string) string {
	if len(s) <= 80 {
		return s
	}
	end := 77
	for end > 0 && s[end]&0xc0 == 0x80 {
		end--
	}
	return s[:end] + "..."
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
