// Command ferry-agent is the in-sandbox side of ferry's agent mode. ferry
// installs it over the exec channel and runs `ferry-agent serve`, which
// speaks the agent protocol on stdin and stdout; the agent runs itself as
// `ferry-agent supervise STATEDIR` to supervise a detached command. It is
// not meant to be run by hand.
package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/ferry-dev/ferry/transfer/agent"
)

// version is set at build time (-ldflags -X main.version=...).
var version = "dev"

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "supervise" {
		// The supervisor of a detached command (agent.Spawn): the agent
		// starts it as `supervise STATEDIR`, and it outlives the agent.
		os.Exit(agent.SuperviseMain(os.Args[2:]))
	}
	if len(os.Args) != 2 || (os.Args[1] != "serve" && os.Args[1] != "version") {
		fmt.Fprintln(os.Stderr, "usage: ferry-agent serve|version|supervise STATEDIR")
		os.Exit(2)
	}
	digest, err := selfDigest()
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferry-agent: %v\n", err)
		os.Exit(1)
	}
	if os.Args[1] == "version" {
		fmt.Printf("ferry-agent %s protocol %d sha256:%x\n", version, agent.ProtocolVersion, digest)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Non-blocking, stdin goes through Go's poller, so closing it (on
	// SIGTERM) ends a read in progress.
	stdin := os.Stdin
	if syscall.SetNonblock(0, true) == nil {
		stdin = os.NewFile(0, "stdin")
	}
	err = agent.Serve(ctx, stdin, os.Stdout, agent.ServerConfig{Version: version, Digest: digest, Logger: log})
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "ferry-agent: %v\n", err)
		os.Exit(1)
	}
}

// selfDigest hashes the running binary: the hello carries it, so the host
// knows it talks to the build it installed.
func selfDigest() ([sha256.Size]byte, error) {
	var d [sha256.Size]byte
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return d, fmt.Errorf("open own binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return d, fmt.Errorf("hash own binary: %w", err)
	}
	copy(d[:], h.Sum(nil))
	return d, nil
}
