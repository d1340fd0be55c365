package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
)

// stillOpen is how long a watch that upstream would keep open must stay
// open after the deletion that ends the others.
const stillOpen = 300 * time.Millisecond

// TestWatchSandboxLifetime drives WatchSandbox with each combination of
// its flags through gRPC and checks what it sends and how it ends, as
// upstream's handle_watch_sandbox does: the sandbox first, the end there
// for stop_on_terminal on READY only, the log tail for follow_logs, and an
// end that comes only from what the stream follows.
func TestWatchSandboxLifetime(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{ReadyDelay: 300 * time.Millisecond}})
	c, _ := rawClient(t, g)
	const (
		ready        = "sandbox READY"
		provisioning = "sandbox PROVISIONING"
		deleting     = "sandbox DELETING"
		created      = "log sandbox created"
		readyLog     = "log sandbox ready"
		deletingLog  = "log sandbox deleting"
	)
	type end int
	const (
		eof end = iota
		canceled
		open
	)
	for _, tc := range []struct {
		name string
		req  *openshellv1.WatchSandboxRequest
		// provisioning: watch from the create, before READY; otherwise
		// watch a READY sandbox.
		provisioning bool
		// deleteAfter: delete the sandbox once this many events are in
		// (a stream that must stay open is tried with a deletion too).
		deleteAfter int
		want        []string
		// last, when set, is the final event, after want and whatever
		// the deletion raced in between.
		last string
		end  end
	}{
		{"NoFlags", &openshellv1.WatchSandboxRequest{}, false, 0, []string{ready}, "", open},
		{"StopOnTerminal", &openshellv1.WatchSandboxRequest{StopOnTerminal: true}, false, 0, []string{ready}, "", eof},
		{"StopOnTerminalProvisioning", &openshellv1.WatchSandboxRequest{StopOnTerminal: true}, true, 0, []string{provisioning}, "", open},
		{"FollowStatus", &openshellv1.WatchSandboxRequest{FollowStatus: true}, false, 1, []string{ready, deleting}, "", eof},
		{"FollowStatusStop", &openshellv1.WatchSandboxRequest{FollowStatus: true, StopOnTerminal: true}, false, 0, []string{ready}, "", eof},
		{"FollowStatusStopProvisioning", &openshellv1.WatchSandboxRequest{FollowStatus: true, StopOnTerminal: true}, true, 0, []string{provisioning, ready}, "", eof},
		{"FollowStatusProvisioning", &openshellv1.WatchSandboxRequest{FollowStatus: true}, true, 2, []string{provisioning, ready, deleting}, "", eof},
		{"FollowLogs", &openshellv1.WatchSandboxRequest{FollowLogs: true}, false, 3, []string{ready, created, readyLog, deletingLog}, "", canceled},
		{"FollowLogsTail", &openshellv1.WatchSandboxRequest{FollowLogs: true, LogTailLines: 1}, false, 2, []string{ready, readyLog, deletingLog}, "", canceled},
		{"FollowLogsStop", &openshellv1.WatchSandboxRequest{FollowLogs: true, StopOnTerminal: true}, false, 0, []string{ready}, "", eof},
		{"FollowEvents", &openshellv1.WatchSandboxRequest{FollowEvents: true}, false, 1, []string{ready}, "", canceled},
		{"FollowEventsStop", &openshellv1.WatchSandboxRequest{FollowEvents: true, StopOnTerminal: true}, false, 0, []string{ready}, "", eof},
		{"FollowStatusLogs", &openshellv1.WatchSandboxRequest{FollowStatus: true, FollowLogs: true}, false, 3, []string{ready, created, readyLog}, deleting, eof},
		{"FollowAll", &openshellv1.WatchSandboxRequest{FollowStatus: true, FollowLogs: true, FollowEvents: true}, false, 3, []string{ready, created, readyLog}, deleting, eof},
		{"FollowAllStop", &openshellv1.WatchSandboxRequest{FollowStatus: true, FollowLogs: true, FollowEvents: true, StopOnTerminal: true}, false, 0, []string{ready}, "", eof},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
			defer cancel()
			var id string
			if tc.provisioning {
				resp, err := c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}})
				if err != nil {
					t.Fatal(err)
				}
				id = resp.GetSandbox().GetMetadata().GetId()
			} else {
				id = createReady(t, c, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}}).GetMetadata().GetId()
			}
			req := tc.req
			req.Id = id
			w, err := c.WatchSandbox(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				ev  *openshellv1.SandboxStreamEvent
				err error
			}
			// One Recv at a time, which a wait may leave pending.
			results := make(chan result, 1)
			pending := false
			next := func(wait time.Duration) (string, error, bool) {
				if !pending {
					pending = true
					go func() {
						ev, err := w.Recv()
						results <- result{ev, err}
					}()
				}
				select {
				case r := <-results:
					pending = false
					return describe(r.ev), r.err, true
				case <-time.After(wait):
					return "", nil, false
				}
			}
			var got []string
			deleted := false
			for range 20 {
				wait := rpcTimeout
				if tc.end == open && len(got) >= len(tc.want) {
					wait = stillOpen
				}
				ev, err, ok := next(wait)
				if !ok {
					if tc.end != open {
						t.Fatalf("stream open after %v, want it ended", got)
					}
					if !deleted {
						// Nothing the stream follows ends it, not even
						// the deletion.
						deleteSandbox(t, c, id)
						deleted = true
						continue
					}
					cancel()
					if r := <-results; status.Code(r.err) != codes.Canceled {
						t.Fatalf("after the client cancelled: %v, %v", describe(r.ev), r.err)
					}
					break
				}
				if err != nil {
					wantEnd(t, tc.end == eof, tc.end == canceled, err, got)
					break
				}
				got = append(got, ev)
				if len(got) == tc.deleteAfter && !deleted {
					deleteSandbox(t, c, id)
					deleted = true
				}
			}
			if tc.last != "" {
				if len(got) < len(tc.want)+1 || got[len(got)-1] != tc.last || !slices.Equal(got[:len(tc.want)], tc.want) {
					t.Fatalf("events %v, want %v, then %s last", got, tc.want, tc.last)
				}
			} else if !slices.Equal(got, tc.want) {
				t.Fatalf("events %v, want %v", got, tc.want)
			}
			if !deleted {
				deleteSandbox(t, c, id)
			}
		})
	}
}

func wantEnd(t *testing.T, eof, canceled bool, err error, got []string) {
	t.Helper()
	switch {
	case eof && errors.Is(err, io.EOF):
	case canceled && status.Code(err) == codes.Canceled && status.Convert(err).Message() == "stream closed":
	default:
		t.Fatalf("after %v the stream ended with %v (want EOF %v, CANCELLED %v)", got, err, eof, canceled)
	}
}

func deleteSandbox(t *testing.T, c openshellv1.OpenShellClient, id string) {
	t.Helper()
	list, err := c.ListSandboxes(ctxFor(t), &openshellv1.ListSandboxesRequest{AllWorkspaces: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list.GetSandboxes() {
		if sb.GetMetadata().GetId() == id {
			if _, err := c.DeleteSandbox(ctxFor(t), &openshellv1.DeleteSandboxRequest{Name: sb.GetMetadata().GetName(), Workspace: sb.GetMetadata().GetWorkspace()}); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("sandbox %s not listed", id)
}

// describe names an event by what the table compares: a sandbox's phase or
// a log record's message.
func describe(ev *openshellv1.SandboxStreamEvent) string {
	switch {
	case ev == nil:
		return ""
	case ev.GetSandbox() != nil:
		return "sandbox " + ev.GetSandbox().GetStatus().GetPhase().String()[len("SANDBOX_PHASE_"):]
	case ev.GetLog() != nil:
		return "log " + ev.GetLog().GetMessage()
	}
	return fmt.Sprintf("other %v", ev)
}
