package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay/relaytest"
)

// TestExecLeavesNothing: `ferry exec` past its --timeout, and one whose
// context is cancelled (an operator's ^C), leave nothing running in the
// sandbox, through a gateway that, like upstream's, lets an exec whose
// client went away or whose timeout passed run on: ferry stops it.
func TestExecLeavesNothing(t *testing.T) {
	activeGateway(t)
	wantOK(t, runFerry(t, nil, "sandbox", "create", "-q", "box"))
	const script = "sleep 300 & sleep 300 & echo ready; wait"

	t.Run("timeout", func(t *testing.T) {
		marker := "ferry-" + strings.Repeat("1", 8) + time.Now().Format("150405.000000")
		seen := make(chan bool, 1)
		done := make(chan struct{})
		go func() {
			for range 200 {
				if len(relaytest.Marked(marker)) > 0 {
					seen <- true
					return
				}
				select {
				case <-done:
					seen <- false
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
			seen <- false
		}()
		r := runFerry(t, nil, "exec", "box", "--timeout", "2s", "--env", "FERRY_MARKER="+marker, "--", "sh", "-c", script)
		close(done)
		if !<-seen {
			t.Fatal("no process carried the marker while the exec ran: nothing to leave behind")
		}
		if r.code != 124 {
			t.Fatalf("exec --timeout 2s: exit %d, stderr %q; want 124", r.code, r.stderr)
		}
		if r.stdout != "ready\n" {
			t.Fatalf("stdout %q: the command never ran", r.stdout)
		}
		relaytest.WaitNoMarked(t, marker, 10*time.Second)
	})

	t.Run("cancel", func(t *testing.T) {
		marker := "ferry-" + strings.Repeat("2", 8) + time.Now().Format("150405.000000")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var out, errw syncBuffer
		code := make(chan int, 1)
		go func() {
			code <- run(ctx, []string{"exec", "box", "--env", "FERRY_MARKER=" + marker, "--", "sh", "-c", script}, strings.NewReader(""), &out, &errw)
		}()
		relaytest.WaitMarked(t, marker, 10*time.Second)
		cancel()
		select {
		case c := <-code:
			if c == 0 {
				t.Fatalf("a cancelled exec exited 0: stderr %q", errw.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a cancelled exec did not return")
		}
		relaytest.WaitNoMarked(t, marker, 10*time.Second)
	})
}
