package gateway

import (
	"errors"

	sandboxv1 "github.com/ferry-dev/ferry/proto/openshell/sandbox/v1"
	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/openshell/policy"
)

// defaultCommand is the main process upstream records for a sandbox
// created without one.
var defaultCommand = []string{"/bin/bash", "-l"}

// checkSpec fills in the spec's defaults, as upstream does before it
// checks the spec's limits (validCreate).
func checkSpec(spec *openshellv1.SandboxSpec) error {
	if spec == nil {
		return errors.New("spec is required")
	}
	if len(spec.GetCommand()) == 0 {
		spec.Command = append([]string(nil), defaultCommand...)
		spec.Tty = true
	}
	return nil
}

// checkPolicy refuses a policy upstream refuses, with its message (the
// one implementation ferry's `policy check` runs too). It first clears
// the markers only the gateway may set.
func checkPolicy(p *sandboxv1.SandboxPolicy) error {
	for _, rule := range p.GetNetworkPolicies() {
		for _, ep := range rule.GetEndpoints() {
			ep.ProviderCredentialed = false
		}
	}
	return policy.Validate(p)
}
