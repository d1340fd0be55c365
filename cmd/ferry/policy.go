package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/openshell/policy"
)

func newPolicyCmd(g *globals, s streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Show the built-in sandbox policies and check policy files",
		Long: `OpenShell sandbox policies, in the YAML of openshell sandbox create
--policy. ferry ships two: default (for Rascal runs: the workspace and /tmp
writable, system paths read-only, the unprivileged sandbox user, and the
GitHub, Anthropic, OpenAI and package-registry hosts for the binaries that
need them) and deny-all (no network at all, Landlock required).

A sandbox's policy is enforced by a real OpenShell sandbox; ferry's embedded
gateway checks and stores it but enforces none of it.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("policy needs a subcommand: show or check")
		},
	}
	var output string
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Print a built-in policy (" + strings.Join(policy.Names(), ", ") + ")",
		Long: `Print a built-in policy's YAML, to read or to copy and edit:

  ferry policy show default > policy.yaml

--output FILE writes it to FILE instead, atomically and with mode 0600.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := policy.Builtin(args[0])
			if err != nil {
				return usageError{err}
			}
			if output != "" {
				return policy.WriteFile(output, b)
			}
			_, err = s.out.Write(b)
			return err
		},
	}
	show.Flags().StringVarP(&output, "output", "o", "", "write the policy to FILE (mode 0600) instead of stdout")
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Check a policy file as the gateway would at sandbox creation",
		Long: `Parse a policy file as OpenShell does (unknown keys and wrong types are
errors) and check it as the gateway does when a sandbox is created with it.
An error names the key at fault and its line; the exit status is then 1.
A built-in policy's name checks the built-in one.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := policy.Load(args[0])
			if err != nil {
				return err
			}
			if err := p.Check(); err != nil {
				return fmt.Errorf("policy %s: %w", args[0], err)
			}
			n := len(p.Proto().GetNetworkPolicies())
			switch {
			case g.json:
				return json.NewEncoder(s.out).Encode(map[string]any{"policy": args[0], "ok": true, "network_policies": n})
			case !g.quiet:
				fmt.Fprintf(s.out, "%s: ok (%d network policies)\n", args[0], n)
			}
			return nil
		},
	}
	cmd.AddCommand(show, check)
	return cmd
}

// specFlags are the flags that say what a sandbox is created from, shared
// by `sandbox create` and `run --create`.
type specFlags struct {
	policy    string
	providers []string
	labels    []string
	env       []string
}

// add registers the flags on fs; envFlag names the static-environment
// flag, which run cannot call -e (there it is the command's).
func (sf *specFlags) add(fs *pflag.FlagSet, envFlag, envShort string) {
	fs.StringVar(&sf.policy, "policy", "", "sandbox policy: a YAML file, or a built-in one ("+strings.Join(policy.Names(), ", ")+"); default: the gateway's")
	fs.StringArrayVar(&sf.providers, "provider", nil, "attach the gateway provider NAME, whose credentials the gateway injects (repeatable)")
	fs.StringArrayVar(&sf.labels, "label", nil, "sandbox label KEY=VALUE (repeatable)")
	fs.StringArrayVarP(&sf.env, envFlag, envShort, nil, "sandbox environment KEY=VALUE, seen by every process in it (repeatable; never put secrets here)")
}

// set reports whether any flag was given.
func (sf *specFlags) set() bool {
	return sf.policy != "" || len(sf.providers) > 0 || len(sf.labels) > 0 || len(sf.env) > 0
}

// spec is the Spec for a sandbox called name from image and the flags.
func (sf *specFlags) spec(name, image string) (openshell.Spec, error) {
	spec := openshell.Spec{Name: name, Image: image}
	var err error
	if spec.Env, err = splitEnv(sf.env); err != nil {
		return spec, err
	}
	if spec.Labels, err = splitPairs("--label", sf.labels); err != nil {
		return spec, err
	}
	seen := map[string]bool{}
	for _, p := range sf.providers {
		if p == "" || seen[p] {
			return spec, usagef("--provider %q: want each provider's name once", p)
		}
		seen[p] = true
	}
	spec.Providers = sf.providers
	if sf.policy != "" {
		if spec.Policy, err = policy.Load(sf.policy); err != nil {
			return spec, err
		}
		// Refused here as the gateway would, but naming the line.
		if err := spec.Policy.Check(); err != nil {
			return spec, fmt.Errorf("policy %s: %w", sf.policy, err)
		}
	}
	return spec, nil
}

// splitPairs reads KEY=VALUE flags; a key given twice is a mistake, not
// an override.
func splitPairs(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("%s %q: want KEY=VALUE", flag, kv)
		}
		if _, dup := m[k]; dup {
			return nil, usagef("%s %q: %s given twice", flag, kv, k)
		}
		m[k] = v
	}
	return m, nil
}
