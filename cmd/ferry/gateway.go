package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ferry-dev/ferry/relay/gateway"
)

func newGatewayCmd(g *globals, s streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Serve an embedded OpenShell-compatible gateway (isolates nothing)",
		Args:  exactArgs(0),
		RunE:  func(*cobra.Command, []string) error { return usagef("gateway needs a subcommand: serve or certs") },
	}
	var (
		listen, root, tlsDir string
		plaintext, anyAddr   bool
	)
	serve := &cobra.Command{
		Use:   "serve --listen ADDR --root DIR (--tls-dir DIR | --plaintext)",
		Short: "Serve sandboxes that are directories under --root",
		Long: `Serve the openshell.v1.OpenShell gRPC service with sandboxes that are
directories under --root.

This gateway does not isolate anything: commands run as the gateway's own
user, with its access to the machine. Use it for tests and demos, never to
run untrusted code.

With --tls-dir it serves TLS and requires client certificates signed by the
directory's ca.crt (see 'ferry gateway certs'). --plaintext serves without
TLS, and only on a loopback address unless --plaintext-any-address is given
too. The line "listening on ADDR" on stderr tells the address bound.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if listen == "" || root == "" {
				return usagef("serve needs --listen ADDR and --root DIR")
			}
			if plaintext == (tlsDir != "") {
				return usagef("serve needs exactly one of --tls-dir DIR and --plaintext")
			}
			if anyAddr && !plaintext {
				return usagef("--plaintext-any-address goes with --plaintext")
			}
			opts := gateway.ServerOptions()
			if tlsDir != "" {
				tlsCfg, err := gateway.LoadServerTLS(tlsDir)
				if err != nil {
					return err
				}
				opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
			} else if !anyAddr {
				if err := requireLoopback(listen); err != nil {
					return err
				}
			}
			// The logger PersistentPreRun made for this run: the process-wide
			// default may be another run's by the time serve stops (tests run
			// ferry in-process).
			log := slog.Default()
			srv, err := gateway.New(gateway.Config{Root: root, Logger: log})
			if err != nil {
				return err
			}
			defer srv.Close()
			lis, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen: %w", err)
			}
			gs := grpc.NewServer(opts...)
			srv.Register(gs)
			mode := "mTLS"
			if plaintext {
				mode = "plaintext"
			}
			fmt.Fprintf(s.err, "listening on %s (%s)\n", lis.Addr(), mode)
			served := make(chan error, 1)
			go func() { served <- gs.Serve(lis) }()
			select {
			case err := <-served:
				return fmt.Errorf("serve: %w", err)
			case <-cmd.Context().Done():
			}
			// Let running execs finish briefly, then cut them.
			stopped := make(chan struct{})
			go func() { gs.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(5 * time.Second):
				gs.Stop()
				<-stopped
			}
			<-served
			log.Info("gateway stopped")
			return nil
		},
	}
	f := serve.Flags()
	f.StringVar(&listen, "listen", "", "address to listen on, host:port (port 0 picks one)")
	f.StringVar(&root, "root", "", "directory that holds the sandboxes")
	f.StringVar(&tlsDir, "tls-dir", "", "serve mTLS with ca.crt, server.crt and server.key from this directory")
	f.BoolVar(&plaintext, "plaintext", false, "serve without TLS (loopback addresses only)")
	f.BoolVar(&anyAddr, "plaintext-any-address", false, "with --plaintext, allow a non-loopback address: anyone who reaches it can run commands")

	var hosts []string
	certs := &cobra.Command{
		Use:   "certs DIR",
		Short: "Write a CA, a server and a client certificate for a local gateway",
		Long: `Write a new certificate authority and two certificates signed by it into DIR:
ca.crt and ca.key, server.crt and server.key (for 'ferry gateway serve
--tls-dir DIR'), and client/{ca.crt,tls.crt,tls.key}, laid out as an
OpenShell gateway's mtls/ directory. The server certificate names localhost,
127.0.0.1 and ::1, and every --host. Existing files are never overwritten.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := gateway.WriteCerts(args[0], hosts); err != nil {
				return err
			}
			if !g.quiet {
				fmt.Fprintf(s.out, "wrote certificates to %s\n", args[0])
			}
			return nil
		},
	}
	certs.Flags().StringArrayVar(&hosts, "host", nil, "another DNS name or IP address for the server certificate (repeatable)")
	cmd.AddCommand(serve, certs)
	return cmd
}

func requireLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--listen %q: %v", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return usageError{errors.New("--plaintext serves only on a loopback address (127.0.0.1, ::1, localhost); add --plaintext-any-address to insist")}
	}
	return nil
}
