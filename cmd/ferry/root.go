package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/ferry-dev/ferry/transfer"

	"github.com/spf13/cobra"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/transfer/agent/bundle"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// streams are the process's standard files, passed in so tests can drive
// the CLI in-process.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

// globals are the flags every command shares (DESIGN.md, "The command
// line").
type globals struct {
	gateway    string
	ssh        string
	transport  string
	sshKey     string
	sshKnown   string
	sshInsec   bool
	workspace  string
	json       bool
	quiet      bool
	verbose    bool
	mode       string
	compress   string
	store      string
	s3Endpoint string
	grace      time.Duration // prune's --grace; 0: session.DefaultGrace

	errw      io.Writer // stderr, for the one notice below
	toldAgent bool      // noAgentNotice has been printed
}

// noAgentNotice is what a ferry built without its agent (go install, a
// plain go build) says once, at its first transfer, instead of falling back
// to POSIX mode in silence.
const noAgentNotice = "ferry: this build carries no agent (it was not built with `make build`): files move in POSIX mode, through the sandbox's sh and tar; build ferry with `make build` for agent mode, or pass --mode posix to say so and silence this\n"

// agentBundle is where the agent builds come from: the ones embedded by
// `make build`. Tests substitute builds of their own.
var agentBundle = bundle.Embedded

// sandbox is the named sandbox reached through x, with the transfer mode
// and compression the flags ask for.
func (g *globals) sandbox(x relay.Execer, name string) (ferry.Sandbox, error) {
	mode, err := transfer.ParseMode(g.mode)
	if err != nil {
		return ferry.Sandbox{}, usageError{err}
	}
	comp, err := frame.ParseMode(g.compress)
	if err != nil {
		return ferry.Sandbox{}, usageError{err}
	}
	sb := ferry.Sandbox{X: x, Name: name, Mode: mode, Compress: comp, Logger: slog.Default()}
	if mode != transfer.ModePOSIX {
		if sb.Agents, err = agentBundle(); err != nil {
			return ferry.Sandbox{}, err
		}
		if len(sb.Agents) == 0 {
			if mode == transfer.ModeAgent {
				return ferry.Sandbox{}, fmt.Errorf("--mode agent: %w: this build carries no agent; build ferry with `make build`", transfer.ErrAgentRequired)
			}
			if !g.toldAgent && !g.quiet && g.errw != nil {
				g.toldAgent = true
				fmt.Fprint(g.errw, noAgentNotice)
			}
		} else {
			sb.AgentMemory = g.agentMemory()
		}
	}
	return sb, nil
}

// usageError is a mistake in how ferry was called: exit 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitCode carries a remote command's exit code out of a command.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func newRoot(s streams) *cobra.Command {
	g := &globals{errw: s.err}
	root := &cobra.Command{
		Use:   "ferry",
		Short: "Move files into and out of agent sandboxes through the gateway's exec channel",
		Long: `ferry runs commands in remote agent sandboxes and moves files in and out
through the sandbox gateway's exec channel: an OpenShell gateway (gRPC), or
plain SSH. It also serves an embedded OpenShell-compatible gateway for tests
and demos.

The gateway is --gateway URL, else $OPENSHELL_GATEWAY_ENDPOINT, else the
active OpenShell gateway configuration (~/.config/openshell).`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			level := slog.LevelWarn
			if g.verbose {
				level = slog.LevelDebug
			} else if cmd.Name() == "serve" {
				level = slog.LevelInfo
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: level})))
		},
	}
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&g.gateway, "gateway", "", "OpenShell gateway URL (http:// or https://)")
	pf.StringVar(&g.ssh, "ssh", "", "reach the sandbox by direct SSH as USER@HOST[:PORT] instead of a gateway")
	pf.StringVar(&g.transport, "transport", "exec", "how commands reach a sandbox through the gateway: exec (its exec RPCs) or ssh (SSH over its ForwardTcp relay)")
	pf.StringVar(&g.sshKey, "ssh-identity", "", "private key file for --ssh (default: ssh-agent)")
	pf.StringVar(&g.sshKnown, "ssh-known-hosts", "", "known_hosts file for --ssh (default ~/.ssh/known_hosts)")
	pf.BoolVar(&g.sshInsec, "ssh-insecure-ignore-host-key", false, "accept any SSH host key (anyone on the path can impersonate the host)")
	pf.StringVar(&g.workspace, "workspace", "", "OpenShell workspace (default $OPENSHELL_WORKSPACE, else \"default\")")
	pf.BoolVar(&g.json, "json", false, "print results as JSON")
	pf.BoolVarP(&g.quiet, "quiet", "q", false, "print nothing but errors")
	pf.BoolVarP(&g.verbose, "verbose", "v", false, "log debug detail to stderr")
	pf.StringVar(&g.mode, "mode", "auto", "how files move: auto (the agent where it runs, else posix), agent, or posix (the sandbox's sh and tar)")
	pf.StringVar(&g.compress, "compress", "auto", "agent-mode compression: auto (zstd or S2, whichever the link pays for), zstd, s2, or none")
	pf.StringVar(&g.s3Endpoint, "s3-endpoint", "", "S3-compatible endpoint URL for an s3:// store (default $AWS_ENDPOINT_URL, else AWS)")
	pf.StringVar(&g.store, "store", "", "session store: a directory or s3://BUCKET/PREFIX (default $FERRY_STORE, else $XDG_STATE_HOME/ferry or ~/.local/state/ferry)")

	root.AddCommand(newGatewayCmd(g, s), newSandboxCmd(g, s), newProviderCmd(g, s), newExecCmd(g, s), newCpCmd(g, s), newPullCmd(g, s), newRunCmd(g, s), newDiffCmd(g, s), newSessionCmd(g, s), newPolicyCmd(g, s))
	return root
}

// run executes one ferry invocation and returns its exit code.
func run(ctx context.Context, args []string, in io.Reader, out, errw io.Writer) int {
	root := newRoot(streams{in: in, out: out, err: errw})
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var code exitCode
	var usage usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &usage) || isCobraUsage(err):
		fmt.Fprintf(errw, "ferry: %v\nRun 'ferry --help' for usage.\n", err)
		return 2
	default:
		fmt.Fprintf(errw, "ferry: %s\n", oneLine(err))
		return 1
	}
}

// isCobraUsage recognises the errors cobra makes itself for unknown
// commands; cobra has no type for them.
func isCobraUsage(err error) bool {
	return strings.HasPrefix(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "unknown flag")
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ")), " ")
}

// exactArgs is cobra.ExactArgs as a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %d argument(s), got %d", cmd.CommandPath(), n, len(args))
		}
		return nil
	}
}
