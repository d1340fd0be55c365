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
	"syscall"

	"github.com/ferry-dev/ferry/relay/grpcbuf"
)

func main() {
	grpcbuf.Install()
	growPipes(os.Stdin, os.Stdout)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
