package main

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/cmd/ferry/internal/linkemu"
)

// TestLinkPath: with the bench set up behind an emulated link, ferry cp
// (CLI → embedded gateway) and tar over ssh both cross it: every byte of
// their payload is counted at the link, each way as it went, and each
// command took at least the link's round trips of its handshakes. It
// guards BenchmarkLink against a peer that bypasses the link and so
// measures loopback.
func TestLinkPath(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gateway and sshd")
	}
	p := linkemu.Profile{Name: "test", Shape: linkemu.Shape{BitsPerSecond: 200e6, Delay: 10 * time.Millisecond}}
	s := startBenchLink(t, &p)
	set := makeBigSet(t, filepath.Join(t.TempDir(), "big"), 1<<20)
	for _, mode := range []string{"posix", "agent"} {
		dst := "bench:up-" + mode
		up := s.ferryCp(t, mode, set.dir, dst)
		set.check(t, "ferry cp --mode "+mode, filepath.Join(s.sandbox, "up-"+mode))
		down := s.ferryCp(t, mode, dst, filepath.Join(t.TempDir(), "down"))
		for _, c := range []struct {
			what     string
			r        result
			sent, rx int64
		}{{"up", up, up.link.Up, up.link.Down}, {"down", down, down.link.Down, down.link.Up}} {
			if c.sent < set.want.bytes || c.rx >= set.want.bytes || c.r.link.Conns < 1 || c.r.seconds < (2*p.RTT()).Seconds() {
				t.Errorf("ferry cp --mode %s %s: %.3f s, link %+v; want %d payload bytes or more across it that way, a connection, 2 RTTs",
					mode, c.what, c.r.seconds, c.r.link, set.want.bytes)
			}
		}
	}
	dst := filepath.Join(t.TempDir(), "ssh")
	res := s.shPipe(t, fmt.Sprintf("tar -cf - -C %s big | %s %s", shq(filepath.Dir(set.dir)), shJoin(s.sshArgv()),
		shq("mkdir -p "+shq(dst)+" && tar -xf - -C "+shq(dst))))
	set.check(t, "tar | ssh", filepath.Join(dst, "big"))
	if res.link.Up < set.want.bytes || res.link.Conns != 1 || res.link.RoundTrips() < 3 {
		t.Errorf("tar | ssh: link %+v, %d round trips; want %d bytes up or more, one connection, an SSH handshake's round trips", res.link, res.link.RoundTrips(), set.want.bytes)
	}
}
