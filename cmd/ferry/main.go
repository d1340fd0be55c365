// Command ferry moves files into and out of remote agent sandboxes through a
// sandbox gateway's exec channel, and runs commands there.
//
// Exit codes: `ferry exec` exits with the remote command's code; ferry's own
// failures exit 1 with one line on stderr; usage errors exit 2.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/ferry-dev/ferry/relay/grpcbuf"
)

// heapLimit keeps ferry's peak RSS under the 64 MiB it aims for.
const heapLimit = 40 << 20

func main() {
	grpcbuf.Install()
	// A soft heap limit, unless GOMEMLIMIT says otherwise: a download's
	// buffers (gRPC's window, frames in flight) are mostly garbage soon
	// after, and by default the heap grows to twice what is live before
	// the collector runs. The limit only makes it run sooner near it.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(heapLimit)
	}
	growPipes(os.Stdin, os.Stdout)
	if p := os.Getenv("FERRY_CPUPROFILE"); p != "" {
		stop := startCPUProfile(p)
		code := runMain(os.Args[1:])
		stop()
		os.Exit(code)
	}
	os.Exit(runMain(os.Args[1:]))
}

// runMain runs ferry as the process does: SIGINT and SIGTERM cancel the
// run's context, and ferry returns through its cleanup (the artifact pull,
// --delete) rather than dying; further signals are ignored until then.
func runMain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, args, os.Stdin, os.Stdout, os.Stderr)
}
