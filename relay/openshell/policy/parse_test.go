package policy_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	sandboxv1 "github.com/ferry-dev/ferry/proto/openshell/sandbox/v1"
	"github.com/ferry-dev/ferry/relay/openshell/policy"
)

// everyField names every key of upstream's policy schema once.
const everyField = `
version: 3
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /etc]
  read_write: [/sandbox]
landlock:
  compatibility: hard_requirement
process:
  run_as_user: sandbox
  run_as_group: "1000"
network_policies:
  api:
    name: api-rule
    endpoints:
      - host: api.example.com
        path: /v1/**
        ports: [443, 8443]
        protocol: rest
        tls: terminate
        enforcement: enforce
        access: read-only
        rules:
          - allow:
              method: GET
              path: /repos/**
              command: SELECT
              query:
                repo: "NVIDIA/*"
                tag: { any: [a, b] }
              operation_type: query
              operation_name: Get*
              fields: [viewer]
        allowed_ips: [10.0.5.0/24]
        deny_rules:
          - method: POST
            path: /admin/**
            command: DROP
            query: { x: y }
            operation_type: mutation
            operation_name: Del*
            fields: [deleteRepo]
        allow_encoded_slash: true
        websocket_credential_rewrite: true
        request_body_credential_rewrite: true
        allow_uninspected_credentials: true
        persisted_queries: allow_registered
        graphql_persisted_queries:
          abc123:
            operation_type: query
            operation_name: Viewer
            fields: [viewer]
        graphql_max_body_bytes: 4096
        credential_signing: sigv4
        signing_service: bedrock
        signing_region: us-east-1
        credential_binding: { provider: aws }
        json_rpc: { max_body_bytes: 1024 }
    binaries:
      - { path: /usr/bin/curl, harness: true }
  tools:
    endpoints:
      - host: mcp.example.com
        port: 443
        protocol: mcp
        mcp:
          max_body_bytes: 2048
          strict_tool_names: false
          allow_all_known_mcp_methods: true
        rules:
          - allow:
              tool: "read_*"
              params:
                meta: { owner: { any: [me] } }
        deny_rules:
          - tool: delete
            params: { name: drop }
network_middlewares:
  guard:
    name: content-guard
    middleware: content_guard
    order: -2
    config:
      mode: strict
      limit: 3
      ratio: 0.5
      on: true
      nothing: ~
      list: [1, two]
      nested: { a: { b: c } }
    on_error: fail_open
    endpoints:
      include: ["*.example.com"]
      exclude: [api.example.com]
`

func wantEveryField(t *testing.T) *sandboxv1.SandboxPolicy {
	t.Helper()
	config, err := structpb.NewStruct(map[string]any{
		"mode": "strict", "limit": 3.0, "ratio": 0.5, "on": true, "nothing": nil,
		"list": []any{1.0, "two"}, "nested": map[string]any{"a": map[string]any{"b": "c"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	no, yes := false, true
	return &sandboxv1.SandboxPolicy{
		Version:    3,
		Filesystem: &sandboxv1.FilesystemPolicy{IncludeWorkdir: true, ReadOnly: []string{"/usr", "/etc"}, ReadWrite: []string{"/sandbox"}},
		Landlock:   &sandboxv1.LandlockPolicy{Compatibility: "hard_requirement"},
		Process:    &sandboxv1.ProcessPolicy{RunAsUser: "sandbox", RunAsGroup: "1000"},
		NetworkPolicies: map[string]*sandboxv1.NetworkPolicyRule{
			"api": {
				Name: "api-rule",
				Endpoints: []*sandboxv1.NetworkEndpoint{{
					Host: "api.example.com", Path: "/v1/**", Port: 443, Ports: []uint32{443, 8443},
					Protocol: "rest", Tls: "terminate", Enforcement: "enforce", Access: "read-only",
					Rules: []*sandboxv1.L7Rule{{Allow: &sandboxv1.L7Allow{
						Method: "GET", Path: "/repos/**", Command: "SELECT",
						Query: map[string]*sandboxv1.L7QueryMatcher{
							"repo": {Glob: "NVIDIA/*"},
							"tag":  {Any: []string{"a", "b"}},
						},
						OperationType: "query", OperationName: "Get*", Fields: []string{"viewer"},
					}}},
					AllowedIps: []string{"10.0.5.0/24"},
					DenyRules: []*sandboxv1.L7DenyRule{{
						Method: "POST", Path: "/admin/**", Command: "DROP",
						Query:         map[string]*sandboxv1.L7QueryMatcher{"x": {Glob: "y"}},
						OperationType: "mutation", OperationName: "Del*", Fields: []string{"deleteRepo"},
					}},
					AllowEncodedSlash: true, WebsocketCredentialRewrite: true, RequestBodyCredentialRewrite: true,
					AllowUninspectedCredentials: true,
					PersistedQueries:            "allow_registered",
					GraphqlPersistedQueries: map[string]*sandboxv1.GraphqlOperation{
						"abc123": {OperationType: "query", OperationName: "Viewer", Fields: []string{"viewer"}},
					},
					GraphqlMaxBodyBytes: 4096,
					CredentialSigning:   "sigv4", SigningService: "bedrock", SigningRegion: "us-east-1",
					CredentialBinding:   &sandboxv1.NetworkCredentialBinding{Provider: "aws"},
					JsonRpcMaxBodyBytes: 1024,
				}},
				// harness is read and dropped, as upstream does.
				Binaries: []*sandboxv1.NetworkBinary{{Path: "/usr/bin/curl"}},
			},
			"tools": {
				Name: "tools", // the key, as upstream defaults it
				Endpoints: []*sandboxv1.NetworkEndpoint{{
					Host: "mcp.example.com", Port: 443, Ports: []uint32{443}, Protocol: "mcp",
					JsonRpcMaxBodyBytes: 2048,
					Mcp:                 &sandboxv1.McpOptions{StrictToolNames: &no, AllowAllKnownMcpMethods: &yes},
					Rules: []*sandboxv1.L7Rule{{Allow: &sandboxv1.L7Allow{Params: map[string]*sandboxv1.L7QueryMatcher{
						"name":       {Glob: "read_*"},
						"meta.owner": {Any: []string{"me"}},
					}}}},
					// params.name wins over tool.
					DenyRules: []*sandboxv1.L7DenyRule{{Params: map[string]*sandboxv1.L7QueryMatcher{"name": {Glob: "drop"}}}},
				}},
			},
		},
		NetworkMiddlewares: map[string]*sandboxv1.NetworkMiddlewareConfig{
			"guard": {
				Name: "content-guard", Middleware: "content_guard", Order: -2, Config: config, OnError: "fail_open",
				Endpoints: &sandboxv1.MiddlewareEndpointSelector{Include: []string{"*.example.com"}, Exclude: []string{"api.example.com"}},
			},
		},
	}
}

func TestParseEveryField(t *testing.T) {
	p, err := policy.Parse([]byte(everyField))
	if err != nil {
		t.Fatal(err)
	}
	wantProto(t, wantEveryField(t), p.Proto())
}

// TestParseNormalises covers upstream's defaults and normalisation, one
// rule each.
func TestParseNormalises(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       *sandboxv1.SandboxPolicy
	}{
		{"VersionOnly", "version: 1", &sandboxv1.SandboxPolicy{Version: 1}},
		{"NullIsOmitted", "version: 1\nfilesystem_policy: ~\nlandlock:\nprocess: null", &sandboxv1.SandboxPolicy{Version: 1}},
		{"EmptySections", "version: 1\nfilesystem_policy: {}\nlandlock: {}\nprocess: {}", &sandboxv1.SandboxPolicy{
			Version: 1, Filesystem: &sandboxv1.FilesystemPolicy{}, Landlock: &sandboxv1.LandlockPolicy{}, Process: &sandboxv1.ProcessPolicy{}}},
		{"PortBecomesPorts", "version: 1\nnetwork_policies: {r: {endpoints: [{host: h, port: 80}]}}", withRule("r", &sandboxv1.NetworkEndpoint{Host: "h", Port: 80, Ports: []uint32{80}})},
		{"PortsWin", "version: 1\nnetwork_policies: {r: {endpoints: [{host: h, port: 80, ports: [81, 82]}]}}", withRule("r", &sandboxv1.NetworkEndpoint{Host: "h", Port: 81, Ports: []uint32{81, 82}})},
		{"NoPort", "version: 1\nnetwork_policies: {r: {endpoints: [{host: h}]}}", withRule("r", &sandboxv1.NetworkEndpoint{Host: "h"})},
		{"MCPBodyWinsOverJSONRPC", "version: 1\nnetwork_policies: {r: {endpoints: [{host: h, json_rpc: {max_body_bytes: 5}, mcp: {}}]}}", withRule("r", &sandboxv1.NetworkEndpoint{Host: "h"})},
		{"JSONRPCBody", "version: 1\nnetwork_policies: {r: {endpoints: [{host: h, json_rpc: {max_body_bytes: 5}}]}}", withRule("r", &sandboxv1.NetworkEndpoint{Host: "h", JsonRpcMaxBodyBytes: 5})},
		{"StringsAreText", "version: 1\nprocess: {run_as_user: ~, run_as_group: }\nlandlock: {compatibility: true}\nfilesystem_policy: {read_only: [~, 1.5]}",
			&sandboxv1.SandboxPolicy{Version: 1, Process: &sandboxv1.ProcessPolicy{RunAsUser: "~"}, Landlock: &sandboxv1.LandlockPolicy{Compatibility: "true"},
				Filesystem: &sandboxv1.FilesystemPolicy{ReadOnly: []string{"~", "1.5"}}}},
		{"NullListsAndOptions", "version: 1\nnetwork_policies: {r: {endpoints: [{host: h, rules: ~, mcp: ~, credential_binding: ~}], binaries: ~}}",
			withRule("r", &sandboxv1.NetworkEndpoint{Host: "h"})},
		{"StringFromNumber", "version: 1\nprocess: {run_as_user: 1000}", &sandboxv1.SandboxPolicy{Version: 1, Process: &sandboxv1.ProcessPolicy{RunAsUser: "1000"}}},
		{"HexVersion", "version: 0x10", &sandboxv1.SandboxPolicy{Version: 16}},
		{"Anchors", "version: 1\nfilesystem_policy: {read_only: &ro [/usr], read_write: *ro}", &sandboxv1.SandboxPolicy{
			Version: 1, Filesystem: &sandboxv1.FilesystemPolicy{ReadOnly: []string{"/usr"}, ReadWrite: []string{"/usr"}}}},
		{"MiddlewareEmptyConfig", "version: 1\nnetwork_middlewares: {m: {middleware: x}}", &sandboxv1.SandboxPolicy{
			Version: 1, NetworkMiddlewares: map[string]*sandboxv1.NetworkMiddlewareConfig{"m": {Name: "m", Middleware: "x", Config: &structpb.Struct{Fields: map[string]*structpb.Value{}}}}}},
		{"EmptyAny", "version: 1\nnetwork_policies: {r: {endpoints: [{host: h, rules: [{allow: {query: {q: {}}}}]}]}}", withRule("r", &sandboxv1.NetworkEndpoint{Host: "h",
			Rules: []*sandboxv1.L7Rule{{Allow: &sandboxv1.L7Allow{Query: map[string]*sandboxv1.L7QueryMatcher{"q": {}}}}}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			wantProto(t, tc.want, p.Proto())
		})
	}
}

func wantProto(t *testing.T, want, got proto.Message) {
	t.Helper()
	if !proto.Equal(want, got) {
		o := prototext.MarshalOptions{Multiline: true}
		t.Fatalf("got:\n%s\nwant:\n%s", o.Format(got), o.Format(want))
	}
}

func withRule(name string, eps ...*sandboxv1.NetworkEndpoint) *sandboxv1.SandboxPolicy {
	return &sandboxv1.SandboxPolicy{Version: 1, NetworkPolicies: map[string]*sandboxv1.NetworkPolicyRule{name: {Name: name, Endpoints: eps}}}
}

// TestParseErrors: every refusal names the key at fault and its line.
func TestParseErrors(t *testing.T) {
	ep := func(body string) string {
		return "version: 1\nnetwork_policies:\n  r:\n    endpoints:\n      - host: h\n        " + body + "\n"
	}
	const epKey = "network_policies.r.endpoints[0]."
	l7 := func(body string) string {
		return "version: 1\nnetwork_policies:\n  r:\n    endpoints:\n      - host: h\n        rules:\n          - allow:\n              " + body + "\n"
	}
	const l7Key = "network_policies.r.endpoints[0].rules[0].allow."
	mw := func(body string) string {
		return "version: 1\nnetwork_middlewares:\n  m:\n    middleware: x\n    " + body + "\n"
	}
	for _, tc := range []struct {
		name, yaml string
		key        string
		line       int
		msg        string
	}{
		{"Empty", "", "version", 0, "missing required key"},
		{"Comment", "# nothing\n", "version", 0, "missing required key"},
		{"NotYAML", "version: [1\n", "", 0, "not YAML"},
		{"TwoDocuments", "version: 1\n---\nversion: 2\n", "", 2, "more than one YAML document"},
		{"NotAMapping", "- version\n", "", 1, "expected a mapping, got a sequence"},
		{"NoVersion", "landlock: {}\n", "version", 1, "missing required key"},
		{"NullVersion", "version: ~\n", "version", 1, "expected an integer (u32), got null"},
		{"VersionString", "version: one\n", "version", 1, `expected an integer (u32), got a string "one"`},
		{"VersionNegative", "version: -1\n", "version", 1, "out of range for u32"},
		{"VersionFloat", "version: 1.5\n", "version", 1, "expected an integer (u32), got a number 1.5"},
		{"VersionUnderscore", "version: 1_0\n", "version", 1, "expected an integer (u32), got a number 1_0"},
		{"VersionHuge", "version: 4294967296\n", "version", 1, "out of range for u32"},
		{"UnknownTop", "version: 1\nfilesystem: {}\n", "filesystem", 2, "unknown key; want one of filesystem_policy, landlock, network_middlewares, network_policies, process, version"},
		{"DuplicateTop", "version: 1\nversion: 2\n", "version", 2, "duplicate key"},
		{"ComplexKey", "version: 1\n? [a]\n: b\n", "", 2, "expected a key, got a sequence"},
		{"MergeKeyUnknown", "version: 1\n<<: {landlock: {}}\n", "<<", 2, "unknown key"},

		{"FilesystemNotMapping", "version: 1\nfilesystem_policy: [a]\n", "filesystem_policy", 2, "expected a mapping, got a sequence"},
		{"FilesystemUnknown", "version: 1\nfilesystem_policy:\n  read_only: []\n  readwrite: []\n", "filesystem_policy.readwrite", 4, "unknown key; want one of include_workdir, read_only, read_write"},
		{"IncludeWorkdirString", "version: 1\nfilesystem_policy: {include_workdir: yes}\n", "filesystem_policy.include_workdir", 2, `expected true or false, got a string "yes"`},
		{"ReadOnlyNotList", "version: 1\nfilesystem_policy: {read_only: /usr}\n", "filesystem_policy.read_only", 2, `expected a sequence, got a string "/usr"`},
		{"ReadWriteItemMapping", "version: 1\nfilesystem_policy:\n  read_write:\n    - /tmp\n    - {a: b}\n", "filesystem_policy.read_write[1]", 5, "expected a string, got a mapping"},
		{"IncludeWorkdirNull", "version: 1\nfilesystem_policy: {include_workdir: ~}\n", "filesystem_policy.include_workdir", 2, "expected true or false, got null"},
		{"LandlockUnknown", "version: 1\nlandlock: {mode: x}\n", "landlock.mode", 2, "unknown key; want one of compatibility"},
		{"LandlockList", "version: 1\nlandlock: {compatibility: [a]}\n", "landlock.compatibility", 2, "expected a string, got a sequence"},
		{"ProcessUnknown", "version: 1\nprocess:\n  user: x\n", "process.user", 3, "unknown key; want one of run_as_group, run_as_user"},
		{"ProcessGroupMapping", "version: 1\nprocess:\n  run_as_group: {}\n", "process.run_as_group", 3, "expected a string, got a mapping"},

		{"PoliciesList", "version: 1\nnetwork_policies: [a]\n", "network_policies", 2, "expected a mapping, got a sequence"},
		{"PolicyNull", "version: 1\nnetwork_policies:\n  r: ~\n", "network_policies.r", 3, "expected a mapping, got null"},
		{"PolicyDuplicate", "version: 1\nnetwork_policies:\n  r: {}\n  r: {}\n", "network_policies.r", 4, "duplicate key"},
		{"PolicyUnknown", "version: 1\nnetwork_policies:\n  r:\n    hosts: []\n", "network_policies.r.hosts", 4, "unknown key; want one of binaries, endpoints, name"},
		{"PolicyName", "version: 1\nnetwork_policies:\n  r:\n    name: [x]\n", "network_policies.r.name", 4, "expected a string"},
		{"EndpointsMapping", "version: 1\nnetwork_policies:\n  r:\n    endpoints: {host: h}\n", "network_policies.r.endpoints", 4, "expected a sequence, got a mapping"},
		{"EndpointScalar", "version: 1\nnetwork_policies:\n  r:\n    endpoints: [h]\n", "network_policies.r.endpoints[0]", 4, `expected a mapping, got a string "h"`},
		{"BinaryNoPath", "version: 1\nnetwork_policies:\n  r:\n    binaries:\n      - {}\n", "network_policies.r.binaries[0].path", 5, "missing required key"},
		{"BinaryUnknown", "version: 1\nnetwork_policies:\n  r:\n    binaries:\n      - {path: /x, sha: y}\n", "network_policies.r.binaries[0].sha", 5, "unknown key; want one of harness, path"},
		{"BinaryHarness", "version: 1\nnetwork_policies:\n  r:\n    binaries:\n      - {path: /x, harness: 1}\n", "network_policies.r.binaries[0].harness", 5, "expected true or false, got a number 1"},

		{"EndpointUnknown", ep("hots: x"), epKey + "hots", 6, "unknown key; want one of access, allow_encoded_slash"},
		{"EndpointAdvisorProposed", ep("advisor_proposed: true"), epKey + "advisor_proposed", 6, "unknown key"},
		{"EndpointProviderCredentialed", ep("provider_credentialed: true"), epKey + "provider_credentialed", 6, "unknown key"},
		{"EndpointFlatRPCBytes", ep("json_rpc_max_body_bytes: 1"), epKey + "json_rpc_max_body_bytes", 6, "unknown key"},
		{"PortTooBig", ep("port: 70000"), epKey + "port", 6, "integer 70000 out of range for u16 (0 to 65535)"},
		{"PortString", ep("port: https"), epKey + "port", 6, `expected an integer (u16), got a string "https"`},
		{"PortQuoted", ep(`port: "443"`), epKey + "port", 6, `expected an integer (u16), got a string "443"`},
		{"PortsScalar", ep("ports: 443"), epKey + "ports", 6, "expected a sequence, got a number 443"},
		{"PortsItem", ep("ports: [443, -1]"), epKey + "ports[1]", 6, "out of range for u16"},
		{"HostList", ep("path: [a]"), epKey + "path", 6, "expected a string, got a sequence"},
		{"ProtocolMapping", ep("protocol: {}"), epKey + "protocol", 6, "expected a string"},
		{"TLSList", ep("tls: []"), epKey + "tls", 6, "expected a string"},
		{"EnforcementList", ep("enforcement: []"), epKey + "enforcement", 6, "expected a string"},
		{"AccessList", ep("access: []"), epKey + "access", 6, "expected a string"},
		{"AllowedIPsScalar", ep("allowed_ips: 10.0.0.1"), epKey + "allowed_ips", 6, "expected a sequence"},
		{"AllowEncodedSlash", ep("allow_encoded_slash: on"), epKey + "allow_encoded_slash", 6, "expected true or false"},
		{"WebsocketRewrite", ep("websocket_credential_rewrite: 1"), epKey + "websocket_credential_rewrite", 6, "expected true or false"},
		{"BodyRewrite", ep("request_body_credential_rewrite: x"), epKey + "request_body_credential_rewrite", 6, "expected true or false"},
		{"Uninspected", ep("allow_uninspected_credentials: []"), epKey + "allow_uninspected_credentials", 6, "expected true or false, got a sequence"},
		{"PersistedQueries", ep("persisted_queries: {}"), epKey + "persisted_queries", 6, "expected a string"},
		{"GraphqlQueriesList", ep("graphql_persisted_queries: []"), epKey + "graphql_persisted_queries", 6, "expected a mapping"},
		{"GraphqlQueryUnknown", ep("graphql_persisted_queries: {h: {type: q}}"), epKey + "graphql_persisted_queries.h.type", 6, "unknown key; want one of fields, operation_name, operation_type"},
		{"GraphqlMaxBody", ep("graphql_max_body_bytes: -5"), epKey + "graphql_max_body_bytes", 6, "out of range for u32"},
		{"CredentialSigning", ep("credential_signing: []"), epKey + "credential_signing", 6, "expected a string"},
		{"SigningService", ep("signing_service: []"), epKey + "signing_service", 6, "expected a string"},
		{"SigningRegion", ep("signing_region: []"), epKey + "signing_region", 6, "expected a string"},
		{"BindingNoProvider", ep("credential_binding: {}"), epKey + "credential_binding.provider", 6, "missing required key"},
		{"BindingUnknown", ep("credential_binding: {provider: p, scope: x}"), epKey + "credential_binding.scope", 6, "unknown key; want one of provider"},
		{"JSONRPCUnknown", ep("json_rpc: {max: 1}"), epKey + "json_rpc.max", 6, "unknown key; want one of max_body_bytes"},
		{"JSONRPCBytes", ep("json_rpc: {max_body_bytes: x}"), epKey + "json_rpc.max_body_bytes", 6, "expected an integer (u32)"},
		{"MCPUnknown", ep("mcp: {strict: true}"), epKey + "mcp.strict", 6, "unknown key; want one of allow_all_known_mcp_methods, max_body_bytes, strict_tool_names"},
		{"MCPStrict", ep("mcp: {strict_tool_names: no}"), epKey + "mcp.strict_tool_names", 6, "expected true or false"},
		{"MCPAllowAll", ep("mcp: {allow_all_known_mcp_methods: 0}"), epKey + "mcp.allow_all_known_mcp_methods", 6, "expected true or false"},
		{"MCPBytes", ep("mcp: {max_body_bytes: 1.0}"), epKey + "mcp.max_body_bytes", 6, "expected an integer (u32)"},
		{"RulesMapping", ep("rules: {allow: {}}"), epKey + "rules", 6, "expected a sequence"},
		{"RuleNoAllow", ep("rules: [{}]"), epKey + "rules[0].allow", 6, "missing required key"},
		{"RuleNullAllow", ep("rules: [{allow: ~}]"), epKey + "rules[0].allow", 6, "must not be null"},
		{"RuleDeny", ep("rules: [{deny: {}}]"), epKey + "rules[0].deny", 6, "unknown key; want one of allow"},
		{"DenyRulesScalar", ep("deny_rules: x"), epKey + "deny_rules", 6, "expected a sequence"},
		{"DenyRuleUnknown", ep("deny_rules: [{verb: GET}]"), epKey + "deny_rules[0].verb", 6, "unknown key; want one of command, fields, method"},

		{"L7Unknown", l7("methods: GET"), l7Key + "methods", 8, "unknown key; want one of command, fields, method, operation_name, operation_type, params, path, query, tool"},
		{"L7Method", l7("method: [GET]"), l7Key + "method", 8, "expected a string"},
		{"L7Path", l7("path: {}"), l7Key + "path", 8, "expected a string"},
		{"L7Command", l7("command: []"), l7Key + "command", 8, "expected a string"},
		{"L7OperationType", l7("operation_type: []"), l7Key + "operation_type", 8, "expected a string"},
		{"L7OperationName", l7("operation_name: []"), l7Key + "operation_name", 8, "expected a string"},
		{"L7Fields", l7("fields: x"), l7Key + "fields", 8, "expected a sequence"},
		{"L7QueryList", l7("query: [a]"), l7Key + "query", 8, "expected a mapping"},
		{"L7QueryMatcherList", l7("query: {q: [a]}"), l7Key + "query.q", 8, "expected a glob or {any: [...]}, got a sequence"},
		{"L7QueryMatcherUnknown", l7("query: {q: {all: [a]}}"), l7Key + "query.q.all", 8, "unknown key; want one of any"},
		{"L7QueryAnyScalar", l7("query: {q: {any: a}}"), l7Key + "query.q.any", 8, "expected a sequence"},
		{"L7QueryNull", l7("query: {q: ~}"), l7Key + "query.q", 8, "expected a glob or {any: [...]}, got null"},
		// Upstream reads matchers through an untagged enum, where only a
		// string is a string.
		{"L7QueryNumber", l7("query: {q: 5}"), l7Key + "query.q", 8, "expected a glob or {any: [...]}, got a number 5"},
		{"L7QueryAnyNumber", l7("query: {q: {any: [x, true]}}"), l7Key + "query.q.any[1]", 8, "expected a string, got a boolean true"},
		{"L7ToolNumber", l7("tool: 5"), l7Key + "tool", 8, "expected a glob or {any: [...]}, got a number 5"},
		{"L7ParamNumber", l7("params: {name: 5}"), l7Key + "params.name", 8, "expected a glob or {any: [...]}, got a number 5"},
		{"L7Tool", l7("tool: [a]"), l7Key + "tool", 8, "expected a glob or {any: [...]}"},
		{"L7ParamsList", l7("params: [a]"), l7Key + "params", 8, "expected a mapping"},
		{"L7ParamsValueList", l7("params: {name: [a]}"), l7Key + "params.name", 8, "expected a glob, {any: [...]} or a mapping of params, got a sequence"},
		{"L7ParamsNested", l7("params: {name: {any: [[a]]}}"), l7Key + "params.name.any", 8, "expected a glob, {any: [...]} or a mapping of params, got a sequence"},

		{"MiddlewaresList", "version: 1\nnetwork_middlewares: [a]\n", "network_middlewares", 2, "expected a mapping"},
		{"MiddlewareNoMiddleware", "version: 1\nnetwork_middlewares:\n  m: {}\n", "network_middlewares.m.middleware", 3, "missing required key"},
		{"MiddlewareUnknown", mw("kind: x"), "network_middlewares.m.kind", 5, "unknown key; want one of config, endpoints, middleware, name, on_error, order"},
		{"MiddlewareOrder", mw("order: 2147483648"), "network_middlewares.m.order", 5, "out of range for i32"},
		{"MiddlewareOrderString", mw("order: first"), "network_middlewares.m.order", 5, "expected an integer (i32)"},
		{"MiddlewareConfigList", mw("config: [a]"), "network_middlewares.m.config", 5, "expected a mapping"},
		{"MiddlewareConfigInf", mw("config: {x: .inf}"), "network_middlewares.m.config.x", 5, ".inf is not a JSON number"},
		{"MiddlewareConfigDuplicate", mw("config: {x: 1, x: 2}"), "network_middlewares.m.config.x", 5, "duplicate key"},
		{"MiddlewareOnError", mw("on_error: []"), "network_middlewares.m.on_error", 5, "expected a string"},
		{"MiddlewareEndpointsList", mw("endpoints: [a]"), "network_middlewares.m.endpoints", 5, "expected a mapping"},
		{"MiddlewareSelectorUnknown", mw("endpoints: {hosts: [a]}"), "network_middlewares.m.endpoints.hosts", 5, "unknown key; want one of exclude, include"},
		{"MiddlewareInclude", mw("endpoints: {include: a}"), "network_middlewares.m.endpoints.include", 5, "expected a sequence"},
		{"MiddlewareExclude", mw("endpoints: {exclude: [[a]]}"), "network_middlewares.m.endpoints.exclude[0]", 5, "expected a string, got a sequence"},
		{"MiddlewareName", mw("name: []"), "network_middlewares.m.name", 5, "expected a string"},

		{"TooBig", "version: 1\n#" + strings.Repeat("x", policy.MaxSize), "", 0, "at most 1048576"},
		{"AliasCycle", "version: 1\nnetwork_middlewares: {m: {middleware: x, config: {c: &a [*a]}}}\n", "*", 2, "nested too deep"},
		{"AliasBomb", aliasBomb(), "*", 0, "document too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Parse([]byte(tc.yaml))
			var se *policy.SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse: %v (%T), want a *SyntaxError", err, err)
			}
			if (tc.key != "*" && se.Key != tc.key) || (tc.line != 0 && se.Line != tc.line) || !strings.Contains(se.Msg, tc.msg) {
				t.Fatalf("Parse: key %q line %d msg %q; want key %q line %d msg containing %q", se.Key, se.Line, se.Msg, tc.key, tc.line, tc.msg)
			}
			if tc.line > 0 && !strings.HasPrefix(err.Error(), "line ") {
				t.Fatalf("error %q does not start with its line", err)
			}
		})
	}
}

// aliasBomb is a few hundred bytes that alias their way to 10^9 nodes.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("version: 1\nnetwork_middlewares:\n  m:\n    middleware: x\n    config:\n      x0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		b.WriteString("      x" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// TestParsedIsIndependent: Proto is a copy, so a caller's edit does not
// reach the next request.
func TestParsedIsIndependent(t *testing.T) {
	p, err := policy.Parse([]byte("version: 1\nprocess: {run_as_user: sandbox}"))
	if err != nil {
		t.Fatal(err)
	}
	p.Proto().Process.RunAsUser = "root"
	if got := p.Proto().GetProcess().GetRunAsUser(); got != "sandbox" {
		t.Fatalf("after editing a copy, run_as_user is %q", got)
	}
	var nilPolicy *policy.Policy
	if nilPolicy.Proto() != nil || nilPolicy.Check() != nil {
		t.Fatal("a nil Policy is not the gateway's default")
	}
	if !proto.Equal(p.Proto(), p.Proto()) {
		t.Fatal("two copies differ")
	}
}
