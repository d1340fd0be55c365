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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
