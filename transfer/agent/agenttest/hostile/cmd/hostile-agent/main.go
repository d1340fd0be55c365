// Command hostile-agent is ferry's agent turned hostile (package hostile):
// planted in a sandbox under the name of ferry's cached agent, it serves
// as `serve` does and lies as the scenario beside it (its own path with
// ".json" appended) says. It exists for ferry's tests.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ferry-dev/ferry/transfer/agent/agenttest/hostile"
	"github.com/ferry-dev/ferry/transfer/agent/server"
	"github.com/ferry-dev/ferry/transfer/agent/supervisor"
)

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "supervise" {
		os.Exit(supervisor.Main(os.Args[2:]))
	}
	exe, err := os.Executable()
	if err != nil {
		fail(err)
	}
	path := hostile.ScenarioPath(exe)
	s, err := hostile.Load(path)
	if err != nil {
		fail(err)
	}
	if err := hostile.MarkServed(path); err != nil {
		fail(err)
	}
	digest, err := s.ClaimedDigest()
	if err != nil {
		fail(err)
	}
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	stdin := os.Stdin
	if syscall.SetNonblock(0, true) == nil {
		stdin = os.NewFile(0, "stdin")
	}
	if err := server.Serve(ctx, stdin, os.Stdout, server.Config{Version: "hostile", Digest: digest, Wrap: s.Wrap()}); err != nil && ctx.Err() == nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "hostile-agent: %v\n", err)
	os.Exit(1)
}
