// Package policy reads OpenShell sandbox policies: the YAML files of
// upstream's `openshell sandbox create --policy`, parsed as upstream's
// openshell-policy crate parses them, and checked as its gateway checks
// them at CreateSandbox. It ships two policies of its own, "default" (for
// Rascal runs) and "deny-all".
//
// Neither ferry nor its embedded gateway enforces a policy: a real
// OpenShell sandbox does.
package policy

import (
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	sandboxv1 "github.com/ferry-dev/ferry/proto/openshell/sandbox/v1"
	"github.com/google/renameio/v2"
)

// Policy is a parsed policy. It remembers the lines its keys were read
// from, so that Check can name them.
type Policy struct {
	pb    *sandboxv1.SandboxPolicy
	lines map[string]int
}

// Proto is the policy as sent in SandboxSpec.policy, a copy the caller
// may change. A nil Policy is nil: the gateway's own policy.
func (p *Policy) Proto() *sandboxv1.SandboxPolicy {
	if p == nil {
		return nil
	}
	return proto.Clone(p.pb).(*sandboxv1.SandboxPolicy)
}

// Check refuses the policy as the gateway would refuse it at
// CreateSandbox (Validate), naming each key at fault and its line.
func (p *Policy) Check() error {
	if p == nil {
		return nil
	}
	err := Validate(p.pb)
	var unsafe *UnsafeError
	var reserved *ReservedKeyError
	switch {
	case errors.As(err, &unsafe):
		for i := range unsafe.Violations {
			unsafe.Violations[i].Line = lineOf(p.lines, unsafe.Violations[i].Key)
		}
	case errors.As(err, &reserved):
		reserved.Line = lineOf(p.lines, "network_policies."+reserved.Key)
	}
	return err
}

//go:embed builtin/*.yaml
var builtin embed.FS

// Names are the built-in policies' names.
func Names() []string {
	ents, _ := builtin.ReadDir("builtin")
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}

// ErrUnknownBuiltin means no built-in policy has the name asked for.
var ErrUnknownBuiltin = errors.New("no such built-in policy")

// Builtin is the YAML of the built-in policy called name, for a user to
// read or copy.
func Builtin(name string) ([]byte, error) {
	b, err := builtin.ReadFile("builtin/" + name + ".yaml")
	if err != nil || strings.ContainsAny(name, "/.") {
		return nil, fmt.Errorf("policy %q: %w (have %s)", name, ErrUnknownBuiltin, strings.Join(Names(), ", "))
	}
	return b, nil
}

// Load reads the policy ref names: a built-in one ("default",
// "deny-all") or else a file. A file called like a built-in policy is
// named with a path: ./default.
func Load(ref string) (*Policy, error) {
	if b, err := Builtin(ref); err == nil {
		p, err := Parse(b)
		if err != nil {
			return nil, fmt.Errorf("built-in policy %s: %w", ref, err)
		}
		return p, nil
	}
	return ParseFile(ref)
}

// ParseFile parses the policy file at path; its errors name the file.
func ParseFile(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read policy %s: %w", path, err)
	}
	p, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", path, err)
	}
	return p, nil
}

// WriteFile writes a policy (or any spec file holding one) atomically with
// mode 0600: a reader sees the old file or the whole new one, and nobody
// else reads it, since a policy names the providers and hosts a sandbox
// may reach.
func WriteFile(path string, data []byte) error {
	if err := writePrivate(path, data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// writePrivate replaces path with data, mode 0600 whatever the umask or
// the mode of the file it replaces: renameio's WriteFile would keep that
// mode.
func writePrivate(path string, data []byte) error {
	f, err := renameio.NewPendingFile(path, renameio.WithStaticPermissions(0o600), renameio.WithTempDir(filepath.Dir(path)))
	if err != nil {
		return err
	}
	defer f.Cleanup()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.CloseAtomicallyReplace()
}
