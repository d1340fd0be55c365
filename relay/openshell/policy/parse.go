package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

	sandboxv1 "github.com/ferry-dev/ferry/proto/openshell/sandbox/v1"
)

// MaxSize is the largest policy file Parse reads. A create request holds
// the whole policy in one gRPC message, which a gateway caps at 1 MiB.
const MaxSize = 1 << 20

// maxNodes bounds the YAML nodes one parse visits, aliases expanded: an
// untrusted file of a few lines can otherwise alias its way to billions.
const maxNodes = 1 << 18

// maxKeyLen bounds a key path's length, and so the nesting.
const maxKeyLen = 1024

// SyntaxError is a policy file Parse refuses: not YAML, an unknown key, a
// wrong type, a missing required key. It names the key and its line, as
// upstream's parser (serde with deny_unknown_fields) refuses the same
// files.
type SyntaxError struct {
	// Key is the dotted key at fault ("network_policies.gh.endpoints[0].port");
	// "" is the document itself.
	Key  string
	Line int // 1-based; 0 when the YAML did not parse far enough to say
	Msg  string
}

func (e *SyntaxError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// parser walks one document's nodes into a SandboxPolicy the way
// upstream's serde types read it.
type parser struct {
	nodes int
	// lines is where each key path was written, for errors found later.
	lines map[string]int
}

func (p *parser) errorf(n *yaml.Node, key, format string, a ...any) error {
	return &SyntaxError{Key: key, Line: n.Line, Msg: fmt.Sprintf(format, a...)}
}

// node resolves an alias and charges the node to the parse's budget.
func (p *parser) node(n *yaml.Node, key string) (*yaml.Node, error) {
	for n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return nil, p.errorf(n, key, "alias to nothing")
		}
		n = n.Alias
	}
	// A self-referring alias nests forever, and long keys cost quadratic
	// time: a policy nests a few levels deep.
	if len(key) > maxKeyLen {
		return nil, p.errorf(n, key[:64]+"...", "nested too deep")
	}
	if p.nodes++; p.nodes > maxNodes {
		return nil, p.errorf(n, key, "document too large: more than %d nodes once aliases are expanded", maxNodes)
	}
	return n, nil
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!bool":
			return "a boolean " + n.Value
		case "!!int", "!!float":
			return "a number " + n.Value
		}
		return fmt.Sprintf("a string %q", n.Value)
	}
	return "a document"
}

func join(key, field string) string {
	if key == "" {
		return field
	}
	return key + "." + field
}

// field reads one value of a mapping. A null value is the default of a
// section, list or map, as an omitted key is (serde's Option and
// default); a scalar field reads it as it reads any other value.
type field struct {
	read     func(n *yaml.Node, key string) error
	required bool
	scalar   bool
}

// pairs walks the mapping n in file order, refusing a key that is not a
// scalar or comes twice, and hands each key node and its unresolved value
// to each, with the key's path.
func (p *parser) pairs(n *yaml.Node, key string, each func(k, v *yaml.Node, child string) error) error {
	if n.Kind != yaml.MappingNode {
		return p.errorf(n, key, "expected a mapping, got %s", kindName(n))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, err := p.node(n.Content[i], key)
		if err != nil {
			return err
		}
		if k.Kind != yaml.ScalarNode {
			return p.errorf(k, key, "expected a key, got %s", kindName(k))
		}
		child := join(key, k.Value)
		if seen[k.Value] {
			return p.errorf(k, child, "duplicate key")
		}
		seen[k.Value] = true
		p.lines[child] = k.Line
		if err := each(k, n.Content[i+1], child); err != nil {
			return err
		}
	}
	return nil
}

// fields reads the mapping n, refusing keys not in fs, a key twice, and a
// required key that is missing.
func (p *parser) fields(n *yaml.Node, key string, fs map[string]field) error {
	seen := map[string]bool{}
	err := p.pairs(n, key, func(k, raw *yaml.Node, child string) error {
		f, ok := fs[k.Value]
		if !ok {
			return p.errorf(k, child, "unknown key; want one of %s", strings.Join(sortedKeys(fs), ", "))
		}
		seen[k.Value] = true
		v, err := p.node(raw, child)
		if err != nil {
			return err
		}
		if isNull(v) && !f.scalar {
			if f.required {
				return p.errorf(v, child, "must not be null")
			}
			return nil
		}
		return f.read(v, child)
	})
	if err != nil {
		return err
	}
	for _, name := range sortedKeys(fs) {
		if fs[name].required && !seen[name] {
			return p.errorf(n, join(key, name), "missing required key")
		}
	}
	return nil
}

// entries reads the mapping n as a map with any keys, in file order.
func (p *parser) entries(n *yaml.Node, key string, each func(name string, v *yaml.Node, key string) error) error {
	return p.pairs(n, key, func(k, raw *yaml.Node, child string) error {
		v, err := p.node(raw, child)
		if err != nil {
			return err
		}
		return each(k.Value, v, child)
	})
}

// items reads the sequence n.
func (p *parser) items(n *yaml.Node, key string, each func(v *yaml.Node, key string) error) error {
	if n.Kind != yaml.SequenceNode {
		return p.errorf(n, key, "expected a sequence, got %s", kindName(n))
	}
	for i, c := range n.Content {
		child := fmt.Sprintf("%s[%d]", key, i)
		v, err := p.node(c, child)
		if err != nil {
			return err
		}
		p.lines[child] = v.Line
		if err := each(v, child); err != nil {
			return err
		}
	}
	return nil
}

// str reads a string. Any scalar is one, as its text, as for serde_yaml:
// `name: 42` is "42" and `name: ~` is "~".
func (p *parser) str(dst *string) func(*yaml.Node, string) error {
	return func(n *yaml.Node, key string) error {
		if n.Kind != yaml.ScalarNode {
			return p.errorf(n, key, "expected a string, got %s", kindName(n))
		}
		*dst = n.Value
		return nil
	}
}

// glob reads a string inside a matcher, which upstream reads through an
// untagged enum: there a number, a boolean or null is not a string.
func (p *parser) glob(dst *string) func(*yaml.Node, string) error {
	return func(n *yaml.Node, key string) error {
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
			return p.errorf(n, key, "expected a string, got %s", kindName(n))
		}
		*dst = n.Value
		return nil
	}
}

func (p *parser) strs(dst *[]string) func(*yaml.Node, string) error {
	return p.list(dst, p.str)
}

func (p *parser) list(dst *[]string, elem func(*string) func(*yaml.Node, string) error) func(*yaml.Node, string) error {
	return func(n *yaml.Node, key string) error {
		return p.items(n, key, func(v *yaml.Node, key string) error {
			var s string
			if err := elem(&s)(v, key); err != nil {
				return err
			}
			*dst = append(*dst, s)
			return nil
		})
	}
}

// boolean reads true or false; YAML 1.1's yes and on are strings, as
// for upstream's YAML 1.2 parser.
func (p *parser) boolean(dst *bool) func(*yaml.Node, string) error {
	return func(n *yaml.Node, key string) error {
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
			switch strings.ToLower(n.Value) {
			case "true":
				*dst = true
				return nil
			case "false":
				*dst = false
				return nil
			}
		}
		return p.errorf(n, key, "expected true or false, got %s", kindName(n))
	}
}

func (p *parser) optBool(dst **bool) func(*yaml.Node, string) error {
	return func(n *yaml.Node, key string) error {
		var b bool
		if err := p.boolean(&b)(n, key); err != nil {
			return err
		}
		*dst = &b
		return nil
	}
}

// integer reads a YAML integer in [lo, hi]; what for the error says the
// Rust type upstream reads it into.
func (p *parser) integer(n *yaml.Node, key, what string, lo, hi int64) (int64, error) {
	// yaml.v3 reads 1_000 as YAML 1.1 did; upstream's YAML 1.2 parser
	// reads a string.
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || strings.Contains(n.Value, "_") {
		return 0, p.errorf(n, key, "expected an integer (%s), got %s", what, kindName(n))
	}
	v, err := strconv.ParseInt(n.Value, 0, 64)
	if err != nil || v < lo || v > hi {
		return 0, p.errorf(n, key, "integer %s out of range for %s (%d to %d)", n.Value, what, lo, hi)
	}
	return v, nil
}

func (p *parser) u32(dst *uint32) func(*yaml.Node, string) error {
	return func(n *yaml.Node, key string) error {
		v, err := p.integer(n, key, "u32", 0, math.MaxUint32)
		*dst = uint32(v)
		return err
	}
}

// port reads a port as upstream does, into a u16: 70000 is refused here,
// 0 by the gateway.
func (p *parser) port(dst *uint32) func(*yaml.Node, string) error {
	return func(n *yaml.Node, key string) error {
		v, err := p.integer(n, key, "u16", 0, math.MaxUint16)
		*dst = uint32(v)
		return err
	}
}

func (p *parser) i32(dst *int32) func(*yaml.Node, string) error {
	return func(n *yaml.Node, key string) error {
		v, err := p.integer(n, key, "i32", math.MinInt32, math.MaxInt32)
		*dst = int32(v)
		return err
	}
}

// Parse reads one policy in OpenShell's YAML form (upstream's
// parse_sandbox_policy): the same keys, defaults and normalisation (a
// rule's name defaults to its key, port becomes ports), and the same
// refusals, as a *SyntaxError naming the key and its line. It does not
// check the policy's safety: Check does, as the gateway would.
func Parse(data []byte) (*Policy, error) {
	if len(data) > MaxSize {
		return nil, &SyntaxError{Msg: fmt.Sprintf("policy is %d bytes; at most %d", len(data), MaxSize)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &SyntaxError{Key: "version", Msg: "empty policy: missing required key"}
		}
		return nil, yamlError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, yamlError(err)
		}
		return nil, &SyntaxError{Line: extra.Line, Msg: "more than one YAML document"}
	}
	p := &parser{lines: map[string]int{}}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) != 1 {
			return nil, &SyntaxError{Key: "version", Msg: "empty policy: missing required key"}
		}
		root = root.Content[0]
	}
	root, err := p.node(root, "")
	if err != nil {
		return nil, err
	}
	pb, err := p.policy(root)
	if err != nil {
		return nil, err
	}
	return &Policy{pb: pb, lines: p.lines}, nil
}

// yamlError is a parse error of the YAML itself; yaml.v3 puts the line
// in its text ("yaml: line 3: ...").
func yamlError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, after, ok := strings.Cut(rest, ": "); ok {
			if l, err := strconv.Atoi(n); err == nil {
				line, msg = l, after
			}
		}
	}
	return &SyntaxError{Line: line, Msg: "not YAML: " + msg}
}

func (p *parser) policy(n *yaml.Node) (*sandboxv1.SandboxPolicy, error) {
	pb := &sandboxv1.SandboxPolicy{}
	err := p.fields(n, "", map[string]field{
		"version": {read: p.u32(&pb.Version), required: true, scalar: true},
		"filesystem_policy": {read: func(n *yaml.Node, key string) error {
			fs := &sandboxv1.FilesystemPolicy{}
			pb.Filesystem = fs
			return p.fields(n, key, map[string]field{
				"include_workdir": {read: p.boolean(&fs.IncludeWorkdir), scalar: true},
				"read_only":       {read: p.strs(&fs.ReadOnly)},
				"read_write":      {read: p.strs(&fs.ReadWrite)},
			})
		}},
		"landlock": {read: func(n *yaml.Node, key string) error {
			ll := &sandboxv1.LandlockPolicy{}
			pb.Landlock = ll
			return p.fields(n, key, map[string]field{"compatibility": {read: p.str(&ll.Compatibility), scalar: true}})
		}},
		"process": {read: func(n *yaml.Node, key string) error {
			pr := &sandboxv1.ProcessPolicy{}
			pb.Process = pr
			return p.fields(n, key, map[string]field{
				"run_as_user":  {read: p.str(&pr.RunAsUser), scalar: true},
				"run_as_group": {read: p.str(&pr.RunAsGroup), scalar: true},
			})
		}},
		"network_policies": {read: func(n *yaml.Node, key string) error {
			return p.entries(n, key, func(name string, v *yaml.Node, key string) error {
				rule, err := p.rule(name, v, key)
				if err != nil {
					return err
				}
				if pb.NetworkPolicies == nil {
					pb.NetworkPolicies = map[string]*sandboxv1.NetworkPolicyRule{}
				}
				pb.NetworkPolicies[name] = rule
				return nil
			})
		}},
		"network_middlewares": {read: func(n *yaml.Node, key string) error {
			return p.entries(n, key, func(name string, v *yaml.Node, key string) error {
				mw, err := p.middleware(name, v, key)
				if err != nil {
					return err
				}
				if pb.NetworkMiddlewares == nil {
					pb.NetworkMiddlewares = map[string]*sandboxv1.NetworkMiddlewareConfig{}
				}
				pb.NetworkMiddlewares[name] = mw
				return nil
			})
		}},
	})
	return pb, err
}

func (p *parser) rule(name string, n *yaml.Node, key string) (*sandboxv1.NetworkPolicyRule, error) {
	rule := &sandboxv1.NetworkPolicyRule{}
	if isNull(n) {
		return nil, p.errorf(n, key, "expected a mapping, got null")
	}
	err := p.fields(n, key, map[string]field{
		"name": {read: p.str(&rule.Name), scalar: true},
		"endpoints": {read: func(n *yaml.Node, key string) error {
			return p.items(n, key, func(v *yaml.Node, key string) error {
				ep, err := p.endpoint(v, key)
				rule.Endpoints = append(rule.Endpoints, ep)
				return err
			})
		}},
		"binaries": {read: func(n *yaml.Node, key string) error {
			return p.items(n, key, func(v *yaml.Node, key string) error {
				b := &sandboxv1.NetworkBinary{}
				var harness bool // deprecated upstream: read and dropped
				rule.Binaries = append(rule.Binaries, b)
				return p.fields(v, key, map[string]field{
					"path":    {read: p.str(&b.Path), required: true, scalar: true},
					"harness": {read: p.boolean(&harness), scalar: true},
				})
			})
		}},
	})
	if rule.Name == "" {
		rule.Name = name
	}
	return rule, err
}

func (p *parser) endpoint(n *yaml.Node, key string) (*sandboxv1.NetworkEndpoint, error) {
	ep := &sandboxv1.NetworkEndpoint{}
	var (
		port, rpcBytes, mcpBytes uint32
		ports                    []uint32
		hasRPC, hasMCP           bool
		mcp                      sandboxv1.McpOptions
	)
	err := p.fields(n, key, map[string]field{
		"host": {read: p.str(&ep.Host), scalar: true},
		"path": {read: p.str(&ep.Path), scalar: true},
		"port": {read: p.port(&port), scalar: true},
		"ports": {read: func(n *yaml.Node, key string) error {
			return p.items(n, key, func(v *yaml.Node, key string) error {
				var port uint32
				err := p.port(&port)(v, key)
				ports = append(ports, port)
				return err
			})
		}},
		"protocol":    {read: p.str(&ep.Protocol), scalar: true},
		"tls":         {read: p.str(&ep.Tls), scalar: true},
		"enforcement": {read: p.str(&ep.Enforcement), scalar: true},
		"access":      {read: p.str(&ep.Access), scalar: true},
		"rules": {read: func(n *yaml.Node, key string) error {
			return p.items(n, key, func(v *yaml.Node, key string) error {
				r := &sandboxv1.L7Rule{}
				ep.Rules = append(ep.Rules, r)
				return p.fields(v, key, map[string]field{"allow": {read: func(n *yaml.Node, key string) error {
					a, err := p.l7(n, key)
					r.Allow = &sandboxv1.L7Allow{Method: a.Method, Path: a.Path, Command: a.Command, Query: a.Query,
						OperationType: a.OperationType, OperationName: a.OperationName, Fields: a.Fields, Params: a.Params}
					return err
				}, required: true}})
			})
		}},
		"allowed_ips": {read: p.strs(&ep.AllowedIps)},
		"deny_rules": {read: func(n *yaml.Node, key string) error {
			return p.items(n, key, func(v *yaml.Node, key string) error {
				d, err := p.l7(v, key)
				ep.DenyRules = append(ep.DenyRules, d)
				return err
			})
		}},
		"allow_encoded_slash":             {read: p.boolean(&ep.AllowEncodedSlash), scalar: true},
		"websocket_credential_rewrite":    {read: p.boolean(&ep.WebsocketCredentialRewrite), scalar: true},
		"request_body_credential_rewrite": {read: p.boolean(&ep.RequestBodyCredentialRewrite), scalar: true},
		"allow_uninspected_credentials":   {read: p.boolean(&ep.AllowUninspectedCredentials), scalar: true},
		"persisted_queries":               {read: p.str(&ep.PersistedQueries), scalar: true},
		"graphql_persisted_queries": {read: func(n *yaml.Node, key string) error {
			return p.entries(n, key, func(name string, v *yaml.Node, key string) error {
				op := &sandboxv1.GraphqlOperation{}
				if ep.GraphqlPersistedQueries == nil {
					ep.GraphqlPersistedQueries = map[string]*sandboxv1.GraphqlOperation{}
				}
				ep.GraphqlPersistedQueries[name] = op
				return p.fields(v, key, map[string]field{
					"operation_type": {read: p.str(&op.OperationType), scalar: true},
					"operation_name": {read: p.str(&op.OperationName), scalar: true},
					"fields":         {read: p.strs(&op.Fields)},
				})
			})
		}},
		"graphql_max_body_bytes": {read: p.u32(&ep.GraphqlMaxBodyBytes), scalar: true},
		"credential_signing":     {read: p.str(&ep.CredentialSigning), scalar: true},
		"signing_service":        {read: p.str(&ep.SigningService), scalar: true},
		"signing_region":         {read: p.str(&ep.SigningRegion), scalar: true},
		"credential_binding": {read: func(n *yaml.Node, key string) error {
			b := &sandboxv1.NetworkCredentialBinding{}
			ep.CredentialBinding = b
			return p.fields(n, key, map[string]field{"provider": {read: p.str(&b.Provider), required: true, scalar: true}})
		}},
		"json_rpc": {read: func(n *yaml.Node, key string) error {
			hasRPC = true
			return p.fields(n, key, map[string]field{"max_body_bytes": {read: p.u32(&rpcBytes), scalar: true}})
		}},
		"mcp": {read: func(n *yaml.Node, key string) error {
			hasMCP = true
			return p.fields(n, key, map[string]field{
				"max_body_bytes":              {read: p.u32(&mcpBytes), scalar: true},
				"strict_tool_names":           {read: p.optBool(&mcp.StrictToolNames)},
				"allow_all_known_mcp_methods": {read: p.optBool(&mcp.AllowAllKnownMcpMethods)},
			})
		}},
	})
	if err != nil {
		return ep, err
	}
	// Upstream's normalisation: ports wins, else port becomes [port]; port
	// is then the first of ports.
	switch {
	case len(ports) > 0:
		ep.Ports = ports
	case port > 0:
		ep.Ports = []uint32{port}
	}
	if len(ep.Ports) > 0 {
		ep.Port = ep.Ports[0]
	}
	// One body limit for the JSON-RPC family; an mcp stanza wins.
	switch {
	case hasMCP:
		ep.JsonRpcMaxBodyBytes = mcpBytes
	case hasRPC:
		ep.JsonRpcMaxBodyBytes = rpcBytes
	}
	if mcp.StrictToolNames != nil || mcp.AllowAllKnownMcpMethods != nil {
		ep.Mcp = &mcp
	}
	return ep, nil
}

// l7 reads an allow rule or a deny rule: they have the same keys.
func (p *parser) l7(n *yaml.Node, key string) (*sandboxv1.L7DenyRule, error) {
	r := &sandboxv1.L7DenyRule{}
	var tool *sandboxv1.L7QueryMatcher
	params := map[string]*sandboxv1.L7QueryMatcher{}
	err := p.fields(n, key, map[string]field{
		"method":         {read: p.str(&r.Method), scalar: true},
		"path":           {read: p.str(&r.Path), scalar: true},
		"command":        {read: p.str(&r.Command), scalar: true},
		"operation_type": {read: p.str(&r.OperationType), scalar: true},
		"operation_name": {read: p.str(&r.OperationName), scalar: true},
		"fields":         {read: p.strs(&r.Fields)},
		"query": {read: func(n *yaml.Node, key string) error {
			return p.entries(n, key, func(name string, v *yaml.Node, key string) error {
				m, err := p.matcher(v, key)
				if err != nil {
					return err
				}
				if r.Query == nil {
					r.Query = map[string]*sandboxv1.L7QueryMatcher{}
				}
				r.Query[name] = m
				return nil
			})
		}},
		"tool": {read: func(n *yaml.Node, key string) error {
			m, err := p.matcher(n, key)
			tool = m
			return err
		}},
		"params": {read: func(n *yaml.Node, key string) error {
			return p.entries(n, key, func(name string, v *yaml.Node, key string) error {
				return p.params(name, v, key, params)
			})
		}},
	})
	// MCP's tool is params.name unless params names it itself.
	if tool != nil {
		if _, ok := params["name"]; !ok {
			params["name"] = tool
		}
	}
	if len(params) > 0 {
		r.Params = params
	}
	return r, err
}

// matcher reads a query matcher: a glob, or {any: [globs]}.
func (p *parser) matcher(n *yaml.Node, key string) (*sandboxv1.L7QueryMatcher, error) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		m := &sandboxv1.L7QueryMatcher{}
		return m, p.glob(&m.Glob)(n, key)
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errorf(n, key, "expected a glob or {any: [...]}, got %s", kindName(n))
	}
	m := &sandboxv1.L7QueryMatcher{}
	return m, p.fields(n, key, map[string]field{"any": {read: p.list(&m.Any, p.glob)}})
}

// params flattens nested MCP params into dotted keys ("a.b"), as
// upstream does.
func (p *parser) params(name string, n *yaml.Node, key string, out map[string]*sandboxv1.L7QueryMatcher) error {
	// Upstream's untagged enum: a matcher if it reads as one, else a
	// nested map ({any: x} is then the param "any").
	if n.Kind == yaml.ScalarNode || n.Kind == yaml.MappingNode {
		if m, err := p.matcher(n, key); err == nil {
			out[name] = m
			return nil
		} else if n.Kind == yaml.ScalarNode {
			return err
		}
	}
	if n.Kind != yaml.MappingNode {
		return p.errorf(n, key, "expected a glob, {any: [...]} or a mapping of params, got %s", kindName(n))
	}
	return p.entries(n, key, func(child string, v *yaml.Node, key string) error {
		return p.params(name+"."+child, v, key, out)
	})
}

func (p *parser) middleware(name string, n *yaml.Node, key string) (*sandboxv1.NetworkMiddlewareConfig, error) {
	mw := &sandboxv1.NetworkMiddlewareConfig{}
	config := map[string]any{}
	err := p.fields(n, key, map[string]field{
		"name":       {read: p.str(&mw.Name), scalar: true},
		"middleware": {read: p.str(&mw.Middleware), required: true, scalar: true},
		"order":      {read: p.i32(&mw.Order), scalar: true},
		"config": {read: func(n *yaml.Node, key string) error {
			return p.entries(n, key, func(name string, v *yaml.Node, key string) error {
				val, err := p.value(v, key)
				config[name] = val
				return err
			})
		}},
		"on_error": {read: p.str(&mw.OnError), scalar: true},
		"endpoints": {read: func(n *yaml.Node, key string) error {
			sel := &sandboxv1.MiddlewareEndpointSelector{}
			mw.Endpoints = sel
			return p.fields(n, key, map[string]field{
				"include": {read: p.strs(&sel.Include)},
				"exclude": {read: p.strs(&sel.Exclude)},
			})
		}},
	})
	if err != nil {
		return nil, err
	}
	if mw.Name == "" {
		mw.Name = name
	}
	// Upstream always sends a config, empty when the file has none.
	s, err := structpb.NewStruct(config)
	if err != nil {
		return nil, p.errorf(n, join(key, "config"), "%v", err)
	}
	mw.Config = s
	return mw, nil
}

// value reads free-form middleware config as JSON would hold it.
func (p *parser) value(n *yaml.Node, key string) (any, error) {
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		err := p.entries(n, key, func(name string, v *yaml.Node, key string) error {
			val, err := p.value(v, key)
			m[name] = val
			return err
		})
		return m, err
	case yaml.SequenceNode:
		var s []any
		err := p.items(n, key, func(v *yaml.Node, key string) error {
			val, err := p.value(v, key)
			s = append(s, val)
			return err
		})
		if s == nil {
			s = []any{}
		}
		return s, err
	}
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		return b, p.boolean(&b)(n, key)
	case "!!int":
		v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil {
			return nil, p.errorf(n, key, "integer %s out of range", n.Value)
		}
		return float64(v), nil
	case "!!float":
		v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, p.errorf(n, key, "%s is not a JSON number", n.Value)
		}
		return v, nil
	}
	return n.Value, nil
}

// lineOf is where key, or the nearest key above it, was written.
func lineOf(lines map[string]int, key string) int {
	for key != "" {
		if l, ok := lines[key]; ok {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}
