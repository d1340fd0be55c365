// Command linkproxy runs one link profile in front of an address, for
// tracing a command by hand over an emulated link:
//
//	go run ./cmd/ferry/internal/linkemu/linkproxy -profile region -target 127.0.0.1:PORT
//
// It prints the address to use instead of the target, and on SIGINT or
// SIGTERM the bytes, connections and round trips it carried.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ferry-dev/ferry/cmd/ferry/internal/linkemu"
)

func main() {
	profile := flag.String("profile", "region", "link profile (lan, region, far)")
	target := flag.String("target", "", "address to proxy to, host:port")
	flag.Parse()
	p, ok := linkemu.Lookup(*profile)
	if !ok || *target == "" {
		fmt.Fprintln(os.Stderr, "linkproxy: want -profile lan|region|far and -target host:port")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	l, err := linkemu.Start(ctx, linkemu.ConfigFor(*target, p))
	if err != nil {
		fmt.Fprintln(os.Stderr, "linkproxy:", err)
		os.Exit(1)
	}
	fmt.Println(l.Addr())
	<-ctx.Done()
	s := l.Stats()
	l.Close()
	fmt.Fprintf(os.Stderr, "up %d B, down %d B, %d conns, %d round trips\n", s.Up, s.Down, s.Conns, s.RoundTrips())
}
