package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-dev/ferry/relay/openshell"
)

func newSandboxCmd(g *globals, s streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Create, inspect, stop, start and delete sandboxes on the gateway",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("sandbox needs a subcommand: create, get, delete, stop, start, list or events")
		},
	}
	var (
		image string
		sf    specFlags
	)
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a sandbox and wait until it is ready",
		Long: `Create a sandbox and wait until it is ready.

--policy is OpenShell's policy YAML or a built-in policy (ferry policy show
default); it is checked here as the gateway would check it. --provider
attaches a provider configured on the gateway: its credentials are injected
by the gateway and never land in the sandbox's files. --env values are seen
by every process in the sandbox: never put secrets there.`,
		Example: `  ferry sandbox create box --policy default --provider github --provider anthropic \
      --label ferry.managed=true -e GIT_TERMINAL_PROMPT=0`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := sf.spec(args[0], image)
			if err != nil {
				return err
			}
			return g.withClient(func(c *openshell.Client) error {
				sb, err := c.Create(cmd.Context(), spec)
				if err != nil {
					return err
				}
				return printSandboxes(s.out, g, false, sb)
			})
		},
	}
	create.Flags().StringVar(&image, "image", "", "container image (the gateway's default when empty)")
	sf.add(create.Flags(), "env", "e")

	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a sandbox",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(func(c *openshell.Client) error {
				sb, err := c.Get(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return printSandboxes(s.out, g, false, sb)
			})
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a sandbox and everything in it",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.withClient(func(c *openshell.Client) error { return c.Delete(cmd.Context(), args[0]) }); err != nil {
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
	stop := &cobra.Command{
		Use:   "stop NAME",
		Short: "Stop every process of a sandbox, keeping its files",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(func(c *openshell.Client) error {
				sb, err := c.Stop(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return printSandboxes(s.out, g, false, sb)
			})
		},
	}
	start := &cobra.Command{
		Use:   "start NAME",
		Short: "Start a stopped sandbox and wait until it is ready",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(func(c *openshell.Client) error {
				sb, err := c.Start(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return printSandboxes(s.out, g, false, sb)
			})
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the sandboxes of the workspace",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(func(c *openshell.Client) error {
				all, err := c.List(cmd.Context())
				if err != nil {
					return err
				}
				return printSandboxes(s.out, g, true, all...)
			})
		},
	}
	cmd.AddCommand(create, get, del, stop, start, list, newSandboxEventsCmd(g, s))
	return cmd
}

// sandboxJSON is the stable JSON shape of a sandbox in ferry's output.
type sandboxJSON struct {
	Name      string            `json:"name"`
	ID        string            `json:"id"`
	Workspace string            `json:"workspace"`
	Phase     string            `json:"phase"`
	Created   string            `json:"created,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Providers []string          `json:"providers,omitempty"`
}

func toJSON(i openshell.Info) sandboxJSON {
	j := sandboxJSON{Name: i.Name, ID: i.ID, Workspace: i.Workspace, Phase: i.Phase, Labels: i.Labels, Providers: i.Providers}
	if !i.Created.IsZero() {
		j.Created = i.Created.UTC().Format(time.RFC3339)
	}
	return j
}

func printSandboxes(w io.Writer, g *globals, list bool, sbs ...openshell.Info) error {
	return printObjects(w, g, list, sbs, toJSON, "NAME\tPHASE\tID\tCREATED", func(j sandboxJSON) []string {
		return []string{j.Name, j.Phase, j.ID, j.Created}
	})
}

// printObjects prints the gateway objects of a get (one, list false) or a
// list: --json as each one's JSON shape (a list as an array, never
// null), -q nothing, else a table under header of each one's row.
func printObjects[T, J any](w io.Writer, g *globals, list bool, objs []T, toJSON func(T) J, header string, row func(J) []string) error {
	if g.json {
		enc := json.NewEncoder(w)
		if !list {
			return enc.Encode(toJSON(objs[0]))
		}
		out := make([]J, 0, len(objs))
		for _, o := range objs {
			out = append(out, toJSON(o))
		}
		return enc.Encode(out)
	}
	if g.quiet {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, o := range objs {
		fmt.Fprintln(tw, strings.Join(row(toJSON(o)), "\t"))
	}
	return tw.Flush()
}
