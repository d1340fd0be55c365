package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/openshell/ocsf"
)

// eventsJSON is `ferry sandbox events --json`: the result, then the
// events themselves.
type eventsJSON struct {
	Sandbox string `json:"sandbox"`
	ferry.EventsResult
	Events []ocsf.Event `json:"events"`
}

func newSandboxEventsCmd(g *globals, s streams) *cobra.Command {
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "events NAME",
		Short: "Show a sandbox's OCSF security events from the gateway's log",
		Long: `Show the OCSF security events the sandbox reported to the gateway
(GetSandboxLogs): network connections and HTTP requests allowed or denied,
processes launched and ended, findings, and the rest as "other", oldest
first, then a one-line summary. --json prints the summary's counts and
every event in ferry's normalized shape with the upstream event ("raw").

Lines of the log that claim to be events but cannot be read are skipped
and counted. A log that cannot be read is an error ("events unavailable"),
never an empty list.`,
		Example: `  ferry sandbox events box --since 10m
  ferry --json sandbox events box | jq '.events[] | select(.decision == "denied")'`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if since < 0 {
				return usagef("--since %v: want a positive duration", since)
			}
			var from time.Time
			if since > 0 {
				from = time.Now().Add(-since)
			}
			return g.withClient(func(c *openshell.Client) error {
				res, evs, err := ferry.Events(cmd.Context(), c, name, from)
				if g.json {
					if evs == nil {
						evs = []ocsf.Event{}
					}
					if e := json.NewEncoder(s.out).Encode(eventsJSON{Sandbox: name, EventsResult: res, Events: evs}); e != nil {
						return e
					}
				} else if err == nil {
					printEvents(s.out, evs)
					fmt.Fprintf(s.out, "events: %s\n", res.Summary)
				}
				if err != nil {
					return fmt.Errorf("events unavailable: %w", err)
				}
				return nil
			})
		},
	}
	cmd.Flags().DurationVar(&since, "since", 0, "only events of the last DURATION (0: all the gateway keeps)")
	return cmd
}

// printEvents is the human table; every field is the sandbox's text, so
// control characters are shown escaped.
func printEvents(w io.Writer, evs []ocsf.Event) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tCLASS\tACTIVITY\tDECISION\tSEVERITY\tDETAIL")
	for _, e := range evs {
		dec := string(e.Decision)
		if dec == "" {
			dec = "-"
		}
		class := string(e.Class)
		if e.Class == ocsf.ClassOther {
			class = "other:" + strconv.Itoa(e.ClassUID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Format("15:04:05.000"), class, safe(e.Activity), dec, e.Severity, safe(eventDetail(e)))
	}
	tw.Flush()
}

// eventDetail is what an event was about, in a few words.
func eventDetail(e ocsf.Event) string {
	var parts []string
	if p := e.Process; p != nil {
		parts = append(parts, fmt.Sprintf("%s(%d)", p.Name, p.PID))
	}
	if d := e.Dest; d != nil {
		dst := d.Host
		if d.Port != 0 {
			dst += ":" + strconv.Itoa(d.Port)
		}
		if d.Protocol != "" {
			dst += "/" + d.Protocol
		}
		parts = append(parts, "-> "+dst)
	}
	if e.ExitCode != nil {
		parts = append(parts, "exit "+strconv.Itoa(*e.ExitCode))
	}
	if e.Process != nil && e.Process.CmdLine != "" {
		parts = append(parts, "cmd: "+e.Process.CmdLine)
	}
	if e.Finding != "" {
		parts = append(parts, strconv.Quote(e.Finding))
	}
	if e.Policy != "" {
		parts = append(parts, "policy "+e.Policy)
	}
	if e.Reason != "" {
		parts = append(parts, "reason: "+e.Reason)
	}
	if len(parts) == 0 && e.Message != "" {
		parts = append(parts, e.Message)
	}
	return strings.Join(parts, " ")
}

// safe escapes control characters (a tab would break the table, an
// escape sequence the terminal).
func safe(s string) string {
	q := strconv.QuoteToGraphic(s)
	if q[1:len(q)-1] == strings.ReplaceAll(s, `"`, `\"`) {
		return s
	}
	return q
}
