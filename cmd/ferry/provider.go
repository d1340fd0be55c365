package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-dev/ferry/relay/openshell"
)

func newProviderCmd(g *globals, s streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "provider",
		Short: "Create, inspect and delete the gateway's providers",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("provider needs a subcommand: create, get, delete or list")
		},
	}
	var (
		typ         string
		credentials []string
		config      []string
	)
	create := &cobra.Command{
		Use:   "create NAME --type TYPE --credential KEY...",
		Short: "Create a provider whose credentials the gateway keeps",
		Long: `Create a provider whose credentials the gateway keeps.

Each --credential KEY names an environment variable of ferry's own, whose
value is the credential, as openshell provider create --credential KEY
reads it; the gateway injects it as KEY into the sandboxes that attach
the provider (ferry sandbox create --provider NAME). A credential's value
is never taken from the command line, where other users and shell history
see it, and never shown again: get and list show only its key.`,
		Example: `  GITHUB_TOKEN=$(gh auth token) ferry provider create github --type github --credential GITHUB_TOKEN`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := providerSpec(args[0], typ, credentials, config)
			if err != nil {
				return err
			}
			return g.withClient(func(c *openshell.Client) error {
				p, err := c.CreateProvider(cmd.Context(), spec)
				if err != nil {
					return err
				}
				return printProviders(s.out, g, false, p)
			})
		},
	}
	create.Flags().StringVar(&typ, "type", "", "provider type (github, claude-code, anthropic, openai, ...)")
	create.Flags().StringArrayVar(&credentials, "credential", nil, "credential KEY, its value read from ferry's environment variable KEY (repeatable)")
	create.Flags().StringArrayVar(&config, "config", nil, "non-secret configuration KEY=VALUE (repeatable)")

	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a provider (its credentials' keys, never their values)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(func(c *openshell.Client) error {
				p, err := c.Provider(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return printProviders(s.out, g, false, p)
			})
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the providers of the workspace",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(func(c *openshell.Client) error {
				all, err := c.Providers(cmd.Context())
				if err != nil {
					return err
				}
				return printProviders(s.out, g, true, all...)
			})
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a provider no sandbox attaches",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.withClient(func(c *openshell.Client) error { return c.DeleteProvider(cmd.Context(), args[0]) }); err != nil {
				return err
			}
			switch {
			case g.json:
				return json.NewEncoder(s.out).Encode(map[string]any{"name": args[0], "deleted": true})
			case !g.quiet:
				fmt.Fprintf(s.out, "deleted %s\n", args[0])
			}
			return nil
		},
	}
	cmd.AddCommand(create, get, list, del)
	return cmd
}

// providerSpec is the ProviderSpec the create flags ask for. Credentials
// come from the environment only, as upstream's CLI reads a bare KEY;
// upstream also takes KEY=VALUE, which would put the secret in argv.
func providerSpec(name, typ string, credentials, config []string) (openshell.ProviderSpec, error) {
	spec := openshell.ProviderSpec{Name: name, Type: typ}
	if strings.TrimSpace(typ) == "" {
		return spec, usagef("provider create needs --type TYPE")
	}
	if len(credentials) == 0 {
		return spec, usagef("provider create needs at least one --credential KEY")
	}
	spec.Credentials = make(map[string]string, len(credentials))
	for _, k := range credentials {
		switch {
		case strings.Contains(k, "="):
			return spec, usagef("--credential %q: give the variable's name only; ferry reads its value from its environment, never from the command line", strings.SplitN(k, "=", 2)[0]+"=...")
		case !envName(k):
			return spec, usagef("--credential %q: want an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", k)
		}
		if _, dup := spec.Credentials[k]; dup {
			return spec, usagef("--credential %s given twice", k)
		}
		v, ok := os.LookupEnv(k)
		if !ok || strings.TrimSpace(v) == "" {
			return spec, fmt.Errorf("--credential %s requires local env var '%s' to be set to a non-empty value", k, k)
		}
		spec.Credentials[k] = v
	}
	var err error
	if spec.Config, err = splitPairs("--config", config); err != nil {
		return spec, err
	}
	return spec, nil
}

func envName(k string) bool {
	for i, r := range k {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return k != ""
}

// providerJSON is the stable JSON shape of a provider in ferry's output.
type providerJSON struct {
	Name           string            `json:"name"`
	ID             string            `json:"id"`
	Workspace      string            `json:"workspace"`
	Type           string            `json:"type"`
	CredentialKeys []string          `json:"credential_keys"`
	Config         map[string]string `json:"config,omitempty"`
	Created        string            `json:"created,omitempty"`
}

func toProviderJSON(p openshell.Provider) providerJSON {
	j := providerJSON{Name: p.Name, ID: p.ID, Workspace: p.Workspace, Type: p.Type, CredentialKeys: p.CredentialKeys, Config: p.Config}
	if j.CredentialKeys == nil {
		j.CredentialKeys = []string{}
	}
	if !p.Created.IsZero() {
		j.Created = p.Created.UTC().Format(time.RFC3339)
	}
	return j
}

func printProviders(w io.Writer, g *globals, list bool, ps ...openshell.Provider) error {
	return printObjects(w, g, list, ps, toProviderJSON, "NAME\tTYPE\tCREDENTIALS\tID", func(j providerJSON) []string {
		return []string{j.Name, j.Type, strings.Join(j.CredentialKeys, ","), j.ID}
	})
}
