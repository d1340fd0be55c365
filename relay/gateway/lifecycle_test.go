package gateway_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/relaytest"
)

const (
	phaseReady    = openshellv1.SandboxPhase_SANDBOX_PHASE_READY
	phaseStopping = openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING
	phaseStopped  = openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED
	phaseStarting = openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING
)

// waitPhase polls GetSandbox once every interval until the sandbox is in
// want, as the Python SDK's wait_ready and wait_stopped do (their interval
// is a second; the gateway's ReadyDelay here is far shorter). ERROR fails
// at once, as it makes the SDK raise.
func waitPhase(t testing.TB, c openshellv1.OpenShellClient, name string, want openshellv1.SandboxPhase) *openshellv1.Sandbox {
	t.Helper()
	const interval = 10 * time.Millisecond
	deadline := time.Now().Add(rpcTimeout)
	for time.Now().Before(deadline) {
		resp, err := c.GetSandbox(ctxFor(t), &openshellv1.GetSandboxRequest{Name: name})
		if err != nil {
			t.Fatalf("GetSandbox %s: %v", name, err)
		}
		switch resp.GetSandbox().GetStatus().GetPhase() {
		case want:
			return resp.GetSandbox()
		case openshellv1.SandboxPhase_SANDBOX_PHASE_ERROR:
			t.Fatalf("sandbox %s entered error phase", name)
		}
		time.Sleep(interval)
	}
	t.Fatalf("sandbox %s was not %v within %v", name, want, rpcTimeout)
	return nil
}

func stop(t testing.TB, c openshellv1.OpenShellClient, name string) *openshellv1.Sandbox {
	t.Helper()
	resp, err := c.StopSandbox(ctxFor(t), &openshellv1.StopSandboxRequest{Name: name})
	if err != nil {
		t.Fatalf("StopSandbox %s: %v", name, err)
	}
	return resp.GetSandbox()
}

func start(t testing.TB, c openshellv1.OpenShellClient, name string) *openshellv1.Sandbox {
	t.Helper()
	resp, err := c.StartSandbox(ctxFor(t), &openshellv1.StartSandboxRequest{Name: name})
	if err != nil {
		t.Fatalf("StartSandbox %s: %v", name, err)
	}
	return resp.GetSandbox()
}

func readyCondition(sb *openshellv1.Sandbox) *openshellv1.SandboxCondition {
	for _, c := range sb.GetStatus().GetConditions() {
		if c.GetType() == "Ready" {
			return c
		}
	}
	return nil
}

// TestStopStart stops a sandbox under a running exec and an SSH session,
// checks what a stopped sandbox refuses, and starts it again with its
// files, as a client of upstream's sees it.
func TestStopStart(t *testing.T) {
	b := newBox(t, gatewaytest.Options{}, "box")
	ctx := ctxFor(t)
	wantExit(t, execOnce(ctx, b.c, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"sh", "-c", "echo kept > before-stop"}}), 0)

	// Everything the stop must end: an exec and an SSH session, both
	// sleeping, both marked so that the test can see their processes go.
	execMarker, sshMarker := newMarker(t), newMarker(t)
	execDone := make(chan *execResult, 1)
	go func() {
		execDone <- execOnce(ctx, b.c, &openshellv1.ExecSandboxRequest{
			SandboxId: b.id, Command: []string{"sleep", "60"},
			Environment: map[string]string{"FERRY_MARKER": execMarker},
		})
	}()
	relaytest.WaitMarked(t, execMarker, 5*time.Second)
	f := relayFixture{b}
	sc, _, _ := f.dial(t, "sandbox")
	sess, err := sc.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Start("export FERRY_MARKER=" + sshMarker + "; sleep 60 & wait"); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitMarked(t, sshMarker, 5*time.Second)
	oldToken := token(t, b.c, b.id)

	// A watcher, as a client following the sandbox would be.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	w, err := b.c.WatchSandbox(wctx, &openshellv1.WatchSandboxRequest{Id: b.id, FollowStatus: true})
	if err != nil {
		t.Fatal(err)
	}
	watched := make(chan openshellv1.SandboxPhase, 16)
	go func() {
		defer close(watched)
		for {
			ev, err := w.Recv()
			if err != nil {
				return
			}
			watched <- ev.GetSandbox().GetStatus().GetPhase()
		}
	}()
	if p := <-watched; p != phaseReady {
		t.Fatalf("first watched phase %v, want READY", p)
	}

	sb := stop(t, b.c, "box")
	if got := sb.GetStatus().GetPhase(); got != phaseStopped {
		t.Fatalf("StopSandbox answered phase %v, want STOPPED", got)
	}
	if c := readyCondition(sb); c.GetStatus() != "False" || c.GetReason() != "Stopped" {
		t.Errorf("Ready condition after stop = %v, want False/Stopped", c)
	}
	// The exec ends as upstream's does when its sandbox goes away: the
	// relay closes before an exit status.
	select {
	case r := <-execDone:
		wantStatus(t, r.err, codes.Unavailable, "exec relay closed before the command reported an exit status")
		if r.exited {
			t.Errorf("stopped exec reported an exit: %v", r)
		}
	case <-time.After(rpcTimeout):
		t.Fatal("exec still running after StopSandbox returned")
	}
	if err := sess.Wait(); err == nil {
		t.Error("SSH session ended cleanly by a stop, want an error")
	}
	relaytest.WaitNoMarked(t, execMarker, 5*time.Second)
	relaytest.WaitNoMarked(t, sshMarker, 5*time.Second)

	// STOPPED everywhere a client looks.
	waitPhase(t, b.c, "box", phaseStopped)
	list, err := b.c.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{})
	if err != nil || len(list.GetSandboxes()) != 1 || list.GetSandboxes()[0].GetStatus().GetPhase() != phaseStopped {
		t.Fatalf("ListSandboxes after stop = %v, %v; want box STOPPED", list, err)
	}
	var seen []openshellv1.SandboxPhase
	for p := range watched {
		seen = append(seen, p)
		if p == phaseStopped {
			break
		}
		if p != phaseStopping {
			t.Fatalf("watched %v between READY and STOPPED", p)
		}
	}
	if len(seen) == 0 || seen[len(seen)-1] != phaseStopped {
		t.Fatalf("watch saw %v, want it to end at STOPPED", seen)
	}

	// A stopped sandbox runs nothing and grants no SSH session.
	for _, rpc := range execRPCs {
		r := rpc.run(ctx, b.c, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"true"}})
		wantStatus(t, r.err, codes.FailedPrecondition, "sandbox is not ready")
	}
	_, err = b.c.CreateSshSession(ctx, &openshellv1.CreateSshSessionRequest{SandboxId: b.id})
	wantStatus(t, err, codes.FailedPrecondition, "sandbox is not ready")
	// Stopping it again changes nothing.
	if again := stop(t, b.c, "box"); again.GetStatus().GetPhase() != phaseStopped || again.GetMetadata().GetResourceVersion() != sb.GetMetadata().GetResourceVersion() {
		t.Errorf("second StopSandbox = %v, want the same STOPPED record", again)
	}
	_, err = b.c.StopSandbox(ctx, &openshellv1.StopSandboxRequest{Name: "nope"})
	wantStatus(t, err, codes.NotFound, "sandbox not found")

	// Start answers STARTING; READY follows.
	if got := start(t, b.c, "box").GetStatus().GetPhase(); got != phaseStarting {
		t.Fatalf("StartSandbox answered phase %v, want STARTING", got)
	}
	ready := waitPhase(t, b.c, "box", phaseReady)
	if c := readyCondition(ready); c != nil {
		t.Errorf("READY sandbox still has condition %v", c)
	}
	for p := range watched {
		if p == phaseReady {
			break
		}
		if p != phaseStarting {
			t.Fatalf("watched %v between STOPPED and READY", p)
		}
	}
	wcancel()
	if again := start(t, b.c, "box"); again.GetStatus().GetPhase() != phaseReady {
		t.Errorf("StartSandbox of a READY sandbox = %v, want READY", again)
	}

	r := execOnce(ctx, b.c, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"cat", "before-stop"}})
	wantExit(t, r, 0)
	if r.stdout.String() != "kept\n" {
		t.Errorf("file written before the stop holds %q, want %q", r.stdout.String(), "kept\n")
	}
	// Upstream deletes a stopped sandbox's SSH sessions.
	_, err = openRelay(ctx, b.c, initFrame(sshInit(b.id, oldToken)))
	wantStatus(t, err, codes.Unauthenticated, "invalid or revoked ssh session token")
	if c, _, _ := f.dial(t, "sandbox"); c == nil {
		t.Fatal("no SSH connection with a new token after start")
	}

	logs, err := b.c.GetSandboxLogs(ctx, &openshellv1.GetSandboxLogsRequest{SandboxId: b.id})
	if err != nil {
		t.Fatal(err)
	}
	got := messages(logs.GetLogs())
	if !containsInOrder(got, "sandbox stopping", "sandbox stopped", "sandbox starting", "sandbox ready") {
		t.Errorf("sandbox log %q lacks the stop and start events in order", got)
	}
}

func containsInOrder(s string, parts ...string) bool {
	for _, p := range parts {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}

// TestStopStartRefusals checks the codes and messages of the lifecycle
// RPCs where upstream refuses them.
func TestStopStartRefusals(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{ReadyDelay: time.Hour}})
	c, _ := rawClient(t, g)
	ctx := ctxFor(t)
	if _, err := c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "slow"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"StopNoName", func() error { _, err := c.StopSandbox(ctx, &openshellv1.StopSandboxRequest{}); return err }, codes.InvalidArgument, "name is required"},
		{"StartNoName", func() error { _, err := c.StartSandbox(ctx, &openshellv1.StartSandboxRequest{}); return err }, codes.InvalidArgument, "name is required"},
		{"StopUnknown", func() error {
			_, err := c.StopSandbox(ctx, &openshellv1.StopSandboxRequest{Name: "nope"})
			return err
		}, codes.NotFound, "sandbox not found"},
		{"StartUnknown", func() error {
			_, err := c.StartSandbox(ctx, &openshellv1.StartSandboxRequest{Name: "nope"})
			return err
		}, codes.NotFound, "sandbox not found"},
		{"StopOtherWorkspace", func() error {
			_, err := c.StopSandbox(ctx, &openshellv1.StopSandboxRequest{Name: "slow", Workspace: "other"})
			return err
		}, codes.NotFound, "workspace 'other' not found"},
		{"StopProvisioning", func() error {
			_, err := c.StopSandbox(ctx, &openshellv1.StopSandboxRequest{Name: "slow"})
			return err
		}, codes.FailedPrecondition, "sandbox must be Ready to stop (current phase: Provisioning)"},
		{"StartProvisioning", func() error {
			_, err := c.StartSandbox(ctx, &openshellv1.StartSandboxRequest{Name: "slow"})
			return err
		}, codes.FailedPrecondition, "sandbox must be Stopped to start (current phase: Provisioning)"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantStatus(t, tc.call(), tc.code, tc.msg) })
	}
	resp, err := c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "slow"})
	if err != nil || resp.GetSandbox().GetStatus().GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING {
		t.Fatalf("refused lifecycle calls changed the sandbox: %v, %v", resp, err)
	}
}

// TestStoppedSurvivesRestart: a gateway started on the root of one that
// stopped a sandbox finds it STOPPED, and can start it.
func TestStoppedSurvivesRestart(t *testing.T) {
	b := newBox(t, gatewaytest.Options{}, "box")
	ctx := ctxFor(t)
	wantExit(t, execOnce(ctx, b.c, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"sh", "-c", "echo kept > f"}}), 0)
	stop(t, b.c, "box")

	g2 := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{Root: b.g.Root}})
	c2, _ := rawClient(t, g2)
	if got := waitPhase(t, c2, "box", phaseStopped); got.GetMetadata().GetId() != b.id {
		t.Fatalf("restarted gateway's box has id %s, want %s", got.GetMetadata().GetId(), b.id)
	}
	start(t, c2, "box")
	waitPhase(t, c2, "box", phaseReady)
	r := execOnce(ctx, c2, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"cat", "f"}})
	wantExit(t, r, 0)
	if r.stdout.String() != "kept\n" {
		t.Errorf("file after restart and start holds %q, want %q", r.stdout.String(), "kept\n")
	}
}

// TestLifecycleRecoveredOnRestart: a gateway that went away between the
// steps of a stop or a start leaves STOPPING or STARTING on disk; the next
// one finishes them, as upstream's startup recovery does.
func TestLifecycleRecoveredOnRestart(t *testing.T) {
	for _, tc := range []struct {
		name       string
		left, want openshellv1.SandboxPhase
	}{
		{"Stopping", phaseStopping, phaseStopped},
		{"Starting", phaseStarting, phaseReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{Root: root}})
			c, _ := rawClient(t, g)
			createReady(t, c, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "box"})
			stop(t, c, "box")
			if tc.left == phaseStarting {
				// A gateway whose timer to READY never fires in this
				// test: it went away while STARTING.
				slow := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{Root: root, ReadyDelay: time.Hour}})
				sc, _ := rawClient(t, slow)
				start(t, sc, "box")
			} else {
				setStoredPhase(t, root, "box", phaseStopping)
			}
			g2 := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{Root: root}})
			c2, _ := rawClient(t, g2)
			waitPhase(t, c2, "box", tc.want)
		})
	}
}

// setStoredPhase rewrites the phase in a sandbox's stored record, as a
// gateway that went away mid-change would have left it.
func setStoredPhase(t testing.TB, root, name string, phase openshellv1.SandboxPhase) {
	t.Helper()
	path, pb := storedRecord(t, root, name)
	pb.Status.Phase = phase
	b, err := proto.Marshal(pb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// storedRecord finds the binary record (named by id) of the sandbox name.
func storedRecord(t testing.TB, root, name string) (string, *openshellv1.Sandbox) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(root, ".gateway", "*.pb"))
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		pb := &openshellv1.Sandbox{}
		if err := proto.Unmarshal(b, pb); err != nil {
			t.Fatal(err)
		}
		if pb.GetMetadata().GetName() == name {
			return path, pb
		}
	}
	t.Fatalf("no binary record of %s among %v", name, paths)
	return "", nil
}
