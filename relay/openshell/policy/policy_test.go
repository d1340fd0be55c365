package policy_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/relay/openshell/policy"
)

// TestCheckNamesKeyAndLine: what the gateway refuses, Check refuses with
// the key and line of each entry at fault.
func TestCheckNamesKeyAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // each in the error, in order
	}{
		{"RootUser", "version: 1\nprocess:\n  run_as_user: root\n",
			[]string{"policy contains unsafe content: line 3: process.run_as_user: run_as_user must be 'sandbox' or a numeric UID/GID in range [1, 4294967294], got 'root'"}},
		{"Paths", "version: 1\nfilesystem_policy:\n  read_only:\n    - /usr\n    - usr\n  read_write:\n    - /\n",
			[]string{"line 5: filesystem_policy.read_only[1]: path must be absolute (start with '/'): usr", "; line 7: filesystem_policy.read_write[0]: read-write path is overly broad: /"}},
		{"Endpoint", "version: 1\nnetwork_policies:\n  gh:\n    endpoints:\n      - host: github.com\n      - {host: '*.com', port: 443}\n",
			[]string{"line 5: network_policies.gh.endpoints[0]: network policy 'gh': endpoint 'github.com' must declare at least one port",
				"line 6: network_policies.gh.endpoints[1]: network policy 'gh': TLD wildcard '*.com' is not allowed"}},
		{"Middleware", "version: 1\nnetwork_middlewares:\n  m:\n    middleware: x\n",
			[]string{"line 3: network_middlewares.m: middleware config 'm' is invalid: endpoint selector is required"}},
		{"ReservedKey", "version: 1\nnetwork_policies:\n  ok: {}\n  _provider_github: {}\n",
			[]string{"line 4: network_policies._provider_github: network_policies key '_provider_github' uses reserved '_provider_' prefix"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			err = p.Check()
			if err == nil {
				t.Fatal("Check passed")
			}
			rest := err.Error()
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("Check: %q\nwant (in order) %q", err, w)
				}
				rest = rest[i+len(w):]
			}
			// Validate, the gateway's half, says upstream's words alone.
			verr := policy.Validate(p.Proto())
			if verr == nil || strings.Contains(verr.Error(), "line ") {
				t.Fatalf("Validate: %v, want upstream's message without lines", verr)
			}
			var unsafe *policy.UnsafeError
			var reserved *policy.ReservedKeyError
			if !errors.As(err, &unsafe) && !errors.As(err, &reserved) {
				t.Fatalf("Check: %T, want *UnsafeError or *ReservedKeyError", err)
			}
		})
	}
}

// TestBuiltins: both shipped policies parse, pass the gateway's checks,
// and say what their names promise.
func TestBuiltins(t *testing.T) {
	if got := strings.Join(policy.Names(), ","); got != "default,deny-all" {
		t.Fatalf("Names = %s", got)
	}
	for _, name := range policy.Names() {
		t.Run(name, func(t *testing.T) {
			p, err := policy.Load(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Check(); err != nil {
				t.Fatal(err)
			}
			pb := p.Proto()
			fs := pb.GetFilesystem()
			if !fs.GetIncludeWorkdir() || strings.Join(fs.GetReadWrite(), ",") != "/sandbox,/tmp,/dev/null" {
				t.Errorf("writable: workdir %v, %v; want the workspace, /tmp and /dev/null only", fs.GetIncludeWorkdir(), fs.GetReadWrite())
			}
			for _, sys := range []string{"/usr", "/lib", "/etc", "/proc"} {
				if !contains(fs.GetReadOnly(), sys) {
					t.Errorf("%s is not read-only", sys)
				}
			}
			if pr := pb.GetProcess(); pr.GetRunAsUser() != "sandbox" || pr.GetRunAsGroup() != "sandbox" {
				t.Errorf("process %v, want the sandbox user and group", pr)
			}
			switch name {
			case "deny-all":
				if len(pb.GetNetworkPolicies()) != 0 || len(pb.GetNetworkMiddlewares()) != 0 {
					t.Errorf("deny-all has network rules: %v", pb.GetNetworkPolicies())
				}
				if c := pb.GetLandlock().GetCompatibility(); c != "hard_requirement" {
					t.Errorf("deny-all landlock %q, want hard_requirement", c)
				}
			case "default":
				hosts := map[string][]string{} // host -> rules
				for k, r := range pb.GetNetworkPolicies() {
					if len(r.GetBinaries()) == 0 {
						t.Errorf("rule %s names no binaries: any process could use it", k)
					}
					for _, ep := range r.GetEndpoints() {
						hosts[ep.GetHost()] = append(hosts[ep.GetHost()], k)
						if strings.Join(u32s(ep.GetPorts()), ",") != "443" {
							t.Errorf("%s: ports %v, want 443", ep.GetHost(), ep.GetPorts())
						}
					}
				}
				for _, h := range []string{"github.com", "api.github.com", "codeload.github.com", "objects.githubusercontent.com", "raw.githubusercontent.com",
					"api.anthropic.com", "api.openai.com", "chatgpt.com", "auth.openai.com",
					"registry.npmjs.org", "pypi.org", "files.pythonhosted.org", "proxy.golang.org", "sum.golang.org", "crates.io", "index.crates.io", "static.crates.io"} {
					if len(hosts[h]) == 0 {
						t.Errorf("default does not reach %s", h)
					}
				}
			}
		})
	}
	if _, err := policy.Builtin("nosuch"); !errors.Is(err, policy.ErrUnknownBuiltin) {
		t.Fatalf("Builtin(nosuch) = %v", err)
	}
	if _, err := policy.Builtin("../builtin/default"); !errors.Is(err, policy.ErrUnknownBuiltin) {
		t.Fatalf("Builtin with a path = %v", err)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func u32s(v []uint32) []string {
	var s []string
	for _, x := range v {
		s = append(s, strconv.FormatUint(uint64(x), 10))
	}
	return s
}

// TestLoadFile: a path is a file, a built-in's name is the built-in, and
// a file's errors name it.
func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "default")
	if err := os.WriteFile(path, []byte("version: 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(path)
	if err != nil || p.Proto().GetVersion() != 7 {
		t.Fatalf("Load(%s) = %v, %v; want the file", path, p.Proto(), err)
	}
	p, err = policy.Load("default")
	if err != nil || len(p.Proto().GetNetworkPolicies()) == 0 {
		t.Fatalf("Load(default) = %v; want the built-in", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\nlandlok: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = policy.Load(bad)
	var se *policy.SyntaxError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), bad+": line 2: landlok: unknown key") {
		t.Fatalf("Load(bad) = %v", err)
	}
	if _, err := policy.Load(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load(missing) = %v, want ErrNotExist", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, bytes.Repeat([]byte("#"), policy.MaxSize+10), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Load(big); !errors.As(err, &se) || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("Load(big) = %v, want a size refusal", err)
	}
}

// TestWriteFile: the file is 0600 whatever the umask and whatever was
// there, replaced whole, with no temporary left behind.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte("old, and readable by all"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := policy.Builtin("default")
	if err := policy.WriteFile(path, b); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", fi.Mode(), err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("dir holds %d entries, want the file alone", len(ents))
	}
	if err := policy.WriteFile(filepath.Join(dir, "no", "such", "dir"), b); err == nil {
		t.Fatal("WriteFile into a missing directory succeeded")
	}
}

// FuzzParse: Parse reads files from anyone; it never panics, and what it
// accepts Check can judge and Proto can copy.
func FuzzParse(f *testing.F) {
	f.Add([]byte(everyField))
	for _, name := range policy.Names() {
		b, _ := policy.Builtin(name)
		f.Add(b)
	}
	f.Add([]byte("version: 1\nnetwork_policies: {r: {endpoints: [{host: h, rules: [{allow: {params: {a: {b: {any: [x]}}}}}]}]}}"))
	f.Add([]byte("version: 1\nx: &a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policy.Parse(data)
		if err != nil {
			var se *policy.SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not a *SyntaxError: %v", err, err)
			}
			return
		}
		_ = p.Check()
		_ = p.Proto()
	})
}
