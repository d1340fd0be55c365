package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/relaytest"
)

// reapTimeout is how long a gateway may take to end a process group after
// its RPC has ended.
const reapTimeout = 10 * time.Second

// boxFixture is a gateway with one READY sandbox and a raw client for it.
type boxFixture struct {
	g    *gatewaytest.Gateway
	c    openshellv1.OpenShellClient
	id   string
	name string
}

func newBox(t testing.TB, opts gatewaytest.Options, name string) *boxFixture {
	t.Helper()
	g := gatewaytest.Start(t, opts)
	c, _ := rawClient(t, g)
	return newBoxOn(t, g, c, name)
}

// newBoxOn is another sandbox on b's gateway, for a test that ends it.
func newBoxOn(t testing.TB, g *gatewaytest.Gateway, c openshellv1.OpenShellClient, name string) *boxFixture {
	t.Helper()
	sb := createReady(t, c, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: name})
	return &boxFixture{g: g, c: c, id: sb.GetMetadata().GetId(), name: name}
}

// shortName names a sandbox for the exec RPC named rpcName, within
// the gateway's 19 characters.
func shortName(rpcName string) string {
	return map[string]string{"ExecSandbox": "oneshot", "ExecSandboxInteractive": "inter"}[rpcName]
}

// wantRunsOn checks that the processes marker marks run on once their
// exec has ended without an exit (a client gone, a timeout, a cut
// relay, a refused message), as upstream's sandbox lets them: nothing
// there kills an exec's processes but the end of the sandbox. Deleting
// the sandbox then ends them.
func (b *boxFixture) wantRunsOn(t *testing.T, marker string) {
	t.Helper()
	// A kill at the exec's end would have come by now.
	time.Sleep(300 * time.Millisecond)
	if n := len(relaytest.Marked(marker)); n == 0 {
		t.Fatal("the exec's processes are gone; upstream's sandbox lets them run on")
	}
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	if del, err := b.c.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: b.name}); err != nil || !del.GetDeleted() {
		t.Fatalf("DeleteSandbox = %v, %v", del, err)
	}
	relaytest.WaitNoMarked(t, marker, reapTimeout)
}

func repeat(n int, s string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestHostileExecRequests sends requests that break the gateway's limits
// through both exec RPCs; each is refused before anything runs.
func TestHostileExecRequests(t *testing.T) {
	b := newBox(t, gatewaytest.Options{}, "box")
	big := strings.Repeat("x", 32<<10+1)
	for _, tc := range []struct {
		name string
		req  func(id string) *openshellv1.ExecSandboxRequest
		code codes.Code
		msg  string
	}{
		{"TooManyArgs", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: append([]string{"true"}, repeat(1024, "a")...)}
		}, codes.InvalidArgument, "1025 arguments, at most 1024"},
		{"ArgTooLong", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"echo", big}}
		}, codes.InvalidArgument, "argument 1 is 32769 bytes, at most 32768"},
		{"ArgNUL", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"echo\x00"}}
		}, codes.InvalidArgument, `argument 0 "echo\x00" contains NUL`},
		{"EnvKeyLeadingDigit", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Environment: map[string]string{"1BAD": "v"}}
		}, codes.InvalidArgument, `environment key "1BAD"`},
		{"EnvKeyHyphen", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Environment: map[string]string{"A-B": "v"}}
		}, codes.InvalidArgument, `environment key "A-B"`},
		{"EnvKeyEmpty", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Environment: map[string]string{"": "v"}}
		}, codes.InvalidArgument, `environment key ""`},
		{"EnvKeyReserved", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Environment: map[string]string{"OPENSHELL_X": "v"}}
		}, codes.InvalidArgument, "OPENSHELL_X: OPENSHELL_ keys are reserved"},
		{"EnvKeyReservedLikePyfunc", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Environment: map[string]string{"OPENSHELL_PYFUNC_B64_X": "v"}}
		}, codes.InvalidArgument, "OPENSHELL_PYFUNC_B64_X: OPENSHELL_ keys are reserved"},
		{"EnvValueTooLong", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Environment: map[string]string{"V": big}}
		}, codes.InvalidArgument, "environment value of V is 32769 bytes"},
		{"EnvValueNewline", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Environment: map[string]string{"V": "a\nb"}}
		}, codes.InvalidArgument, "environment value of V contains NUL, newline or carriage return"},
		{"EnvValueCR", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Environment: map[string]string{"V": "a\rb"}}
		}, codes.InvalidArgument, "environment value of V contains NUL, newline or carriage return"},
		{"EnvValueNUL", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Environment: map[string]string{"V": "a\x00b"}}
		}, codes.InvalidArgument, "environment value of V contains NUL, newline or carriage return"},
		{"PyfuncValueNewline", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Environment: map[string]string{"OPENSHELL_PYFUNC_B64": "a\nb"}}
		}, codes.InvalidArgument, "environment value of OPENSHELL_PYFUNC_B64 contains NUL, newline or carriage return"},
		{"WorkdirLF", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Workdir: "/tmp\nx"}
		}, codes.InvalidArgument, `workdir "/tmp\nx" contains NUL, newline or carriage return`},
		{"WorkdirCR", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Workdir: "/tmp\rx"}
		}, codes.InvalidArgument, `workdir "/tmp\rx" contains NUL, newline or carriage return`},
		{"WorkdirNUL", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Workdir: "/tmp\x00x"}
		}, codes.InvalidArgument, `workdir "/tmp\x00x" contains NUL, newline or carriage return`},
		{"WorkdirTooLong", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"true"}, Workdir: strings.Repeat("d", 4097)}
		}, codes.InvalidArgument, "workdir is 4097 bytes, at most 4096"},
		{"AssembledCommandTooLong", func(id string) *openshellv1.ExecSandboxRequest {
			// Each argument and the count are within limits; the quoted
			// whole (about 302,000 bytes) is not.
			return &openshellv1.ExecSandboxRequest{SandboxId: id, Command: append([]string{"true"}, repeat(999, strings.Repeat("y", 300))...)}
		}, codes.InvalidArgument, "exceeds 262144 byte limit"},
		{"EmptyCommand", func(id string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: id}
		}, codes.InvalidArgument, "command is required"},
		{"EmptySandboxID", func(string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{Command: []string{"true"}}
		}, codes.InvalidArgument, "sandbox_id is required"},
		{"UnknownSandboxID", func(string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: "00000000-0000-4000-8000-000000000000", Command: []string{"true"}}
		}, codes.NotFound, "sandbox not found"},
		{"SandboxNameIsNotAnID", func(string) *openshellv1.ExecSandboxRequest {
			return &openshellv1.ExecSandboxRequest{SandboxId: "box", Command: []string{"true"}}
		}, codes.NotFound, "sandbox not found"},
	} {
		for _, rpc := range execRPCs {
			t.Run(tc.name+"/"+rpc.name, func(t *testing.T) {
				r := rpc.run(ctxFor(t), b.c, tc.req(b.id))
				wantStatus(t, r.err, tc.code, tc.msg)
				if r.exited || r.stdout.Len() > 0 || r.stderr.Len() > 0 {
					t.Fatalf("a refused request produced events: %v", r)
				}
				wantNoHeaders(t, r)
			})
		}
	}
}

// wantNoHeaders checks that a refused interactive start was refused
// trailers-only, before any response headers, as upstream's handler
// refuses it (it returns the status before the response stream). A client
// takes headers to mean that the start was accepted and begins streaming
// stdin that it cannot take back; ferry's client does exactly that.
func wantNoHeaders(t testing.TB, r *execResult) {
	t.Helper()
	if r.headers {
		t.Fatalf("refused interactive start sent response headers first (%v)", r.err)
	}
}

// TestHostileSandboxRequests covers the sandbox RPCs' refusals.
func TestHostileSandboxRequests(t *testing.T) {
	b := newBox(t, gatewaytest.Options{}, "box")
	ctx := ctxFor(t)
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"GetUnknown", func() error {
			_, err := b.c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "nobody"})
			return err
		}, codes.NotFound, "sandbox not found"},
		{"GetOtherWorkspace", func() error {
			_, err := b.c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "box", Workspace: "elsewhere"})
			return err
		}, codes.NotFound, "workspace 'elsewhere' not found"},
		{"GetNoName", func() error {
			_, err := b.c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{})
			return err
		}, codes.InvalidArgument, "name is required"},
		{"DeleteUnknown", func() error {
			_, err := b.c.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: "nobody"})
			return err
		}, codes.NotFound, "sandbox not found"},
		{"WatchUnknown", func() error {
			s, err := b.c.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Id: "00000000-0000-4000-8000-000000000000"})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}, codes.NotFound, "sandbox not found"},
		{"CreateUppercase", func() error {
			_, err := b.c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "Box"})
			return err
		}, codes.InvalidArgument, "lowercase alphanumeric characters or hyphens"},
		{"CreateDoubleHyphen", func() error {
			_, err := b.c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "a--b"})
			return err
		}, codes.InvalidArgument, "consecutive hyphens"},
		{"CreateLeadingHyphen", func() error {
			_, err := b.c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "-a"})
			return err
		}, codes.InvalidArgument, "must not start or end with a hyphen"},
		{"CreateTooLong", func() error {
			_, err := b.c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: strings.Repeat("a", 20)})
			return err
		}, codes.InvalidArgument, "name exceeds maximum length (20 > 19)"},
		{"CreatePathEscape", func() error {
			_, err := b.c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "../x"})
			return err
		}, codes.InvalidArgument, "lowercase alphanumeric characters or hyphens"},
		{"CreateDuplicate", func() error {
			_, err := b.c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "box"})
			return err
		}, codes.AlreadyExists, `sandbox "box" already exists`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantStatus(t, tc.call(), tc.code, tc.msg)
		})
	}
	// None of the refused creates left a sandbox or a directory.
	list, err := b.c.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{AllWorkspaces: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetSandboxes()); n != 1 {
		t.Fatalf("ListSandboxes: %d sandboxes, want only box: %v", n, list.GetSandboxes())
	}
	ents, err := os.ReadDir(b.g.Root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{".gateway", "box"}; !slices.Equal(names, want) {
		t.Fatalf("gateway root holds %v, want %v", names, want)
	}
}

// TestHostileNotReady execs in a sandbox that is still provisioning.
func TestHostileNotReady(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{ReadyDelay: 10 * time.Second}})
	c, _ := rawClient(t, g)
	ctx := ctxFor(t)
	resp, err := c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.GetSandbox().GetStatus().GetPhase(); p != openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING {
		t.Fatalf("new sandbox phase %v, want PROVISIONING", p)
	}
	for _, rpc := range execRPCs {
		t.Run(rpc.name, func(t *testing.T) {
			r := rpc.run(ctxFor(t), c, &openshellv1.ExecSandboxRequest{SandboxId: resp.GetSandbox().GetMetadata().GetId(), Command: []string{"true"}})
			wantStatus(t, r.err, codes.FailedPrecondition, "sandbox is not ready")
			wantNoHeaders(t, r)
		})
	}
}

// TestHostileInteractiveProtocol breaks the start-first rule of
// ExecSandboxInteractive.
func TestHostileInteractiveProtocol(t *testing.T) {
	b := newBox(t, gatewaytest.Options{}, "box")

	for _, tc := range []struct {
		name  string
		first *openshellv1.ExecSandboxInput
	}{
		{"StdinFirst", &openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Stdin{Stdin: []byte("hi")}}},
		{"ResizeFirst", &openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Resize{Resize: &openshellv1.ExecSandboxWindowResize{Cols: 80, Rows: 24}}}},
		{"EmptyFirst", &openshellv1.ExecSandboxInput{}},
		{"NothingFirst", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := b.c.ExecSandboxInteractive(ctxFor(t))
			if err != nil {
				t.Fatal(err)
			}
			if tc.first != nil {
				if err := s.Send(tc.first); err != nil {
					t.Fatal(err)
				}
			}
			_ = s.CloseSend()
			r := &execResult{}
			collect(r, s.Recv, nil)
			md, err := s.Header()
			r.headers = err == nil && md != nil
			// Upstream says "first message must be a start payload".
			wantStatus(t, r.err, codes.InvalidArgument, "first message must be")
			wantNoHeaders(t, r)
		})
	}

	t.Run("SecondStart", func(t *testing.T) {
		b := newBoxOn(t, b.g, b.c, "second-start")
		marker := newMarker(t)
		s, err := b.c.ExecSandboxInteractive(ctxFor(t))
		if err != nil {
			t.Fatal(err)
		}
		start := &openshellv1.ExecSandboxRequest{
			SandboxId: b.id, Command: []string{"sh", "-c", "echo ready; exec sleep 600"},
			Environment: map[string]string{"FERRY_MARKER": marker},
		}
		if err := s.Send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Start{Start: start}}); err != nil {
			t.Fatal(err)
		}
		r := &execResult{}
		collect(r, s.Recv, func(out string) bool { return out == "ready\n" })
		if r.err != nil {
			t.Fatalf("before the second start: %v", r)
		}
		relaytest.WaitMarked(t, marker, 5*time.Second)
		_ = s.Send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Start{Start: start}})
		collect(r, s.Recv, nil)
		wantStatus(t, r.err, codes.InvalidArgument, "start may only be sent once")
		if r.exited {
			t.Fatalf("a refused stream reported an exit: %v", r)
		}
		b.wantRunsOn(t, marker)
	})
}

// TestHostileVanishingClient drops the client while a command with
// background children runs. As in upstream's sandbox, the command gets
// its stdin's EOF and runs on, children and all, until the sandbox ends:
// stopping it is the client's business (relay/openshell's mark).
func TestHostileVanishingClient(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c, _ := rawClient(t, g)
	const script = "sleep 600 & sleep 600 & echo ready; cat >/dev/null; : >stdin-eof; wait"

	vanish := []struct {
		name string
		do   func(cancel context.CancelFunc, cc *grpc.ClientConn)
	}{
		{"CloseConn", func(_ context.CancelFunc, cc *grpc.ClientConn) { cc.Close() }},
		{"CancelContext", func(cancel context.CancelFunc, _ *grpc.ClientConn) { cancel() }},
	}
	for _, rpc := range execRPCs {
		for _, v := range vanish {
			t.Run(rpc.name+"/"+v.name, func(t *testing.T) {
				t.Parallel()
				b := newBoxOn(t, g, c, shortName(rpc.name)+"-"+strings.ToLower(v.name[:5]))
				marker := newMarker(t)
				c, cc := rawClient(t, b.g)
				ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
				defer cancel()
				// The interactive stream's stdin stays open: the client is
				// mid-stream when it vanishes.
				s, err := startExec(ctx, c, rpc.name, &openshellv1.ExecSandboxRequest{
					SandboxId: b.id, Command: []string{"sh", "-c", script},
					Environment: map[string]string{"FERRY_MARKER": marker},
				})
				if err != nil {
					t.Fatal(err)
				}
				r := &execResult{}
				collect(r, s.Recv, func(out string) bool { return out == "ready\n" })
				if r.err != nil || r.stdout.String() != "ready\n" {
					t.Fatalf("before vanishing: %v", r)
				}
				// sh and its two sleeps; a child still in its exec has no
				// readable environment yet, so wait a little for all three.
				for deadline := time.Now().Add(5 * time.Second); len(relaytest.Marked(marker)) < 3; time.Sleep(20 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%d marked processes before vanishing, want at least 3", len(relaytest.Marked(marker)))
					}
				}
				v.do(cancel, cc)
				collect(r, s.Recv, nil)
				wantStatus(t, r.err, codes.Canceled, "")
				eof := filepath.Join(b.g.Root, b.name, "stdin-eof")
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
					if _, err := os.Stat(eof); err == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the command never read its stdin's EOF after the client vanished")
					}
				}
				b.wantRunsOn(t, marker)
			})
		}
	}
}

// TestHostileTimeout runs a command past timeout_seconds: exit 124 and a
// clean end of stream; the command runs on, as in upstream's sandbox.
func TestHostileTimeout(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c, _ := rawClient(t, g)
	for _, rpc := range execRPCs {
		t.Run(rpc.name, func(t *testing.T) {
			t.Parallel()
			b := newBoxOn(t, g, c, shortName(rpc.name))
			marker := newMarker(t)
			begin := time.Now()
			r := rpc.run(ctxFor(t), b.c, &openshellv1.ExecSandboxRequest{
				SandboxId: b.id, Command: []string{"sh", "-c", "sleep 600 & sleep 600; wait"},
				Environment: map[string]string{"FERRY_MARKER": marker}, TimeoutSeconds: 1,
			})
			wantExit(t, r, 124)
			if d := time.Since(begin); d < time.Second || d > 10*time.Second {
				t.Fatalf("a 1s timeout took %v", d)
			}
			b.wantRunsOn(t, marker)
		})
	}
}

// TestHostileSignalKilled: a child killed by a signal reports exit code 1,
// as upstream's gateway does.
func TestHostileSignalKilled(t *testing.T) {
	b := newBox(t, gatewaytest.Options{}, "box")
	for _, rpc := range execRPCs {
		t.Run(rpc.name, func(t *testing.T) {
			r := rpc.run(ctxFor(t), b.c, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"sh", "-c", "kill -9 $$"}})
			wantExit(t, r, 1)
		})
	}
}

// TestHostileCutRelay cuts the stream with the fault hook part way through
// 8 MiB of output: UNAVAILABLE with upstream's wording, never an exit; the
// command runs on, its output read and dropped.
func TestHostileCutRelay(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{CutAfter: 1 << 20}})
	c, _ := rawClient(t, g)
	for _, rpc := range execRPCs {
		t.Run(rpc.name, func(t *testing.T) {
			b := newBoxOn(t, g, c, shortName(rpc.name))
			marker := newMarker(t)
			r := rpc.run(ctxFor(t), b.c, &openshellv1.ExecSandboxRequest{
				SandboxId: b.id, Command: []string{"sh", "-c", "sleep 600 & head -c 8388608 /dev/zero; wait"},
				Environment: map[string]string{"FERRY_MARKER": marker},
			})
			wantStatus(t, r.err, codes.Unavailable, "exec relay closed before the command reported an exit status")
			if r.exited {
				t.Fatalf("a cut stream reported exit %d", r.code)
			}
			if n := r.stdout.Len(); n > 1<<20 {
				t.Fatalf("%d bytes of stdout crossed a relay cut after 1 MiB", n)
			}
			b.wantRunsOn(t, marker)
		})
	}
}

// TestHostileDeleteWhileRunning deletes a sandbox under a running exec.
func TestHostileDeleteWhileRunning(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		rounds int
	}{
		{"Sleeping", "sleep 600 & echo ready; wait", 1},
		// Processes that keep creating files in the directory being
		// removed: a gateway that deletes before its execs have ended
		// fails with ENOTEMPTY and leaves the directory behind. The race
		// is narrow, hence the rounds.
		{"Writing", "echo ready; i=0; while :; do i=$((i+1)); mkdir -p d/$i; : > d/$i/f; done", 3},
		{"WritingInBackground", "for w in 1 2; do (i=0; while :; do i=$((i+1)); mkdir -p d$w/$i; : > d$w/$i/f; done) & done; echo ready; wait", 3},
	} {
		for _, rpc := range execRPCs {
			for round := range tc.rounds {
				t.Run(fmt.Sprintf("%s/%s/%d", tc.name, rpc.name, round), func(t *testing.T) {
					deleteWhileRunning(t, rpc.name, tc.script)
				})
			}
		}
	}
}

func deleteWhileRunning(t *testing.T, rpcName, script string) {
	b := newBox(t, gatewaytest.Options{}, "doomed")
	marker := newMarker(t)
	ctx := ctxFor(t)
	s, err := startExec(ctx, b.c, rpcName, &openshellv1.ExecSandboxRequest{
		SandboxId: b.id, Command: []string{"bash", "-c", script},
		Environment: map[string]string{"FERRY_MARKER": marker},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &execResult{}
	collect(r, s.Recv, func(out string) bool { return out == "ready\n" })
	if r.err != nil || r.stdout.String() != "ready\n" {
		t.Fatalf("before the delete: %v", r)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		collect(r, s.Recv, nil)
	}()
	time.Sleep(50 * time.Millisecond) // let the writers get going
	del, err := b.c.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: "doomed"})
	if err != nil || !del.GetDeleted() {
		t.Fatalf("DeleteSandbox under a running exec = %v, %v", del, err)
	}
	<-done // bounded by ctx
	wantStatus(t, r.err, codes.Unavailable, "exec relay closed before the command reported an exit status")
	if r.exited {
		t.Fatalf("an exec in a deleted sandbox reported exit %d", r.code)
	}
	relaytest.WaitNoMarked(t, marker, reapTimeout)
	if _, err := os.Stat(filepath.Join(b.g.Root, "doomed")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("sandbox dir after delete: %v, want it gone", err)
	}
	_, err = b.c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "doomed"})
	wantStatus(t, err, codes.NotFound, "sandbox not found")
}

// eventStream is the receiving half of either exec RPC.
type eventStream interface {
	Recv() (*openshellv1.ExecSandboxEvent, error)
}

// startExec starts req through the RPC named rpcName; the interactive
// stream is left open for stdin.
func startExec(ctx context.Context, c openshellv1.OpenShellClient, rpcName string, req *openshellv1.ExecSandboxRequest) (eventStream, error) {
	if rpcName == "ExecSandbox" {
		return c.ExecSandbox(ctx, req)
	}
	s, err := c.ExecSandboxInteractive(ctx)
	if err != nil {
		return nil, err
	}
	return s, s.Send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Start{Start: req}})
}

// envOf parses `env` output.
func envOf(t testing.TB, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for line := range strings.Lines(out) {
		k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		if !ok {
			t.Fatalf("env line %q has no '='", line)
		}
		m[k] = v
	}
	return m
}

// TestSandboxEnvironment checks that a sandbox process sees the variables
// upstream sets and the sandbox's own, and nothing of the gateway's.
func TestSandboxEnvironment(t *testing.T) {
	leak := "FERRY_LEAK_" + strings.ToUpper(newMarker(t))
	t.Setenv(leak, "from-the-gateway-process")
	b := newBox(t, gatewaytest.Options{}, "plain")
	sb := createReady(t, b.c, &openshellv1.CreateSandboxRequest{
		Name: "envbox",
		Spec: &openshellv1.SandboxSpec{
			Environment: map[string]string{"SPEC_VAR": "spec value", "SHARED": "spec"},
			Template:    &openshellv1.SandboxTemplate{Environment: map[string]string{"TPL_VAR": "tpl 'quoted'", "SHARED": "template"}},
		},
	})
	home := filepath.Join(b.g.Root, "envbox")

	for _, rpc := range execRPCs {
		t.Run(rpc.name, func(t *testing.T) {
			r := rpc.run(ctxFor(t), b.c, &openshellv1.ExecSandboxRequest{
				SandboxId: sb.GetMetadata().GetId(), Command: []string{"env"},
				Environment: map[string]string{"REQ_VAR": "req $HOME `x`", "SPEC_VAR": "overridden by the request"},
			})
			wantExit(t, r, 0)
			env := envOf(t, r.stdout.String())
			want := map[string]string{
				"HOME":     home,
				"SHELL":    "/bin/bash",
				"TERM":     "dumb",
				"REQ_VAR":  "req $HOME `x`",
				"SPEC_VAR": "overridden by the request",
				"TPL_VAR":  "tpl 'quoted'",
				"SHARED":   "spec",
				// The gateway's mark, by which it ends what the
				// sandbox leaves running (procs_linux.go).
				"FERRY_SANDBOX_ID": sb.GetMetadata().GetId(),
			}
			for k, v := range want {
				if env[k] != v {
					t.Errorf("%s = %q, want %q", k, env[k], v)
				}
			}
			if u, err := user.Current(); err == nil && env["USER"] != u.Username {
				t.Errorf("USER = %q, want the gateway's user %q", env["USER"], u.Username)
			}
			// The login shell's /etc/profile may reset PATH.
			if env["PATH"] == "" {
				t.Error("PATH is empty")
			}
			// bash itself sets PWD, SHLVL and _ (and OLDPWD after a cd).
			allowed := map[string]bool{"USER": true, "PATH": true, "PWD": true, "SHLVL": true, "_": true, "OLDPWD": true}
			for k := range env {
				if _, ok := want[k]; !ok && !allowed[k] {
					t.Errorf("unexpected variable %s=%q in a sandbox process", k, env[k])
				}
			}
			if _, ok := env[leak]; ok {
				t.Errorf("the gateway's %s leaked into the sandbox", leak)
			}
			if env["PWD"] != home {
				t.Errorf("PWD = %q, want the sandbox dir %s", env["PWD"], home)
			}
		})
	}

	// The other sandbox has none of envbox's variables.
	r := execOnce(ctxFor(t), b.c, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"env"}})
	wantExit(t, r, 0)
	env := envOf(t, r.stdout.String())
	for _, k := range []string{"SPEC_VAR", "TPL_VAR", "SHARED", "REQ_VAR", leak} {
		if v, ok := env[k]; ok {
			t.Errorf("sandbox plain has %s=%q", k, v)
		}
	}
	if env["HOME"] != filepath.Join(b.g.Root, "plain") {
		t.Errorf("HOME = %q in sandbox plain", env["HOME"])
	}
}

// TestSandboxProfile: the login shell reads the sandbox's own ~/.profile,
// banners included, as a real sandbox's image may.
func TestSandboxProfile(t *testing.T) {
	b := newBox(t, gatewaytest.Options{}, "box")
	profile := filepath.Join(b.g.Root, "box", ".profile")

	if err := os.WriteFile(profile, []byte("export PROFILE_VAR=from-profile\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := execOnce(ctxFor(t), b.c, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"sh", "-c", `echo "$PROFILE_VAR"`}})
	wantExit(t, r, 0)
	if r.stdout.String() != "from-profile\n" {
		t.Fatalf("a variable exported by ~/.profile: %v", r)
	}

	if err := os.WriteFile(profile, []byte("echo 'Welcome to the sandbox'\necho 'profile warning' >&2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, rpc := range execRPCs {
		t.Run("Banner/"+rpc.name, func(t *testing.T) {
			r := rpc.run(ctxFor(t), b.c, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"echo", "payload"}})
			wantExit(t, r, 0)
			if r.stdout.String() != "Welcome to the sandbox\npayload\n" || r.stderr.String() != "profile warning\n" {
				t.Fatalf("banner then command output: %v", r)
			}
		})
	}
}

// TestSandboxWorkdir: a relative workdir is relative to the sandbox dir; a
// missing one fails as bash's cd does.
func TestSandboxWorkdir(t *testing.T) {
	b := newBox(t, gatewaytest.Options{}, "box")
	dir := filepath.Join(b.g.Root, "box")
	for _, d := range []string{filepath.Join("sub", "deeper"), "it's $HOME"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, rpc := range execRPCs {
		t.Run(rpc.name, func(t *testing.T) {
			for _, tc := range []struct{ workdir, want string }{
				{"", dir},
				{"sub", filepath.Join(dir, "sub")},
				{"sub/deeper", filepath.Join(dir, "sub", "deeper")},
				{filepath.Join(dir, "sub"), filepath.Join(dir, "sub")},
				{"it's $HOME", filepath.Join(dir, "it's $HOME")},
			} {
				r := rpc.run(ctxFor(t), b.c, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"pwd"}, Workdir: tc.workdir})
				wantExit(t, r, 0)
				if got := strings.TrimSuffix(r.stdout.String(), "\n"); got != tc.want {
					t.Errorf("workdir %q: pwd = %q, want %q", tc.workdir, got, tc.want)
				}
			}

			r := rpc.run(ctxFor(t), b.c, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"echo", "never"}, Workdir: "nope"})
			if r.err != nil || !r.exited || r.code == 0 {
				t.Fatalf("missing workdir: %v, want a non-zero exit", r)
			}
			if r.stdout.Len() != 0 || !strings.Contains(r.stderr.String(), "cd: nope: No such file or directory") {
				t.Fatalf("missing workdir: %v, want bash's cd error", r)
			}
		})
	}
}
