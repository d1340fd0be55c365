package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
)

// sdk is upstream's Python SandboxClient (python/openshell/sandbox.py at
// v0.0.111) transcribed call for call: each method sends the request its
// namesake builds, with the fields it sets and no others.
type sdk struct {
	c  openshellv1.OpenShellClient
	ws string
	// poll is wait_ready's and wait_stopped's sleep between GetSandbox
	// calls (a second in the SDK; the gateway's ReadyDelay is far less).
	poll time.Duration
}

// create is SandboxClient.create(workspace=, spec=None, name=, labels=):
// spec None becomes _default_spec(), an empty SandboxSpec.
func (s sdk) create(ctx context.Context, name string, labels map[string]string) (*openshellv1.Sandbox, error) {
	if labels == nil {
		labels = map[string]string{}
	}
	resp, err := s.c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: name, Labels: labels, Workspace: s.ws})
	if err != nil {
		return nil, err
	}
	if resp.GetSandbox().GetMetadata().GetId() == "" {
		return nil, errors.New("CreateSandbox returned empty sandbox id")
	}
	return resp.GetSandbox(), nil
}

func (s sdk) get(ctx context.Context, name string) (*openshellv1.Sandbox, error) {
	resp, err := s.c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: name, Workspace: s.ws})
	return resp.GetSandbox(), err
}

// list is SandboxClient.list(workspace=, limit=100, offset=0, label_selector=).
func (s sdk) list(ctx context.Context, selector string) ([]*openshellv1.Sandbox, error) {
	resp, err := s.c.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{Limit: 100, Workspace: s.ws, LabelSelector: selector})
	return resp.GetSandboxes(), err
}

func (s sdk) stop(ctx context.Context, name string) (*openshellv1.Sandbox, error) {
	resp, err := s.c.StopSandbox(ctx, &openshellv1.StopSandboxRequest{Name: name, Workspace: s.ws})
	return resp.GetSandbox(), err
}

func (s sdk) start(ctx context.Context, name string) (*openshellv1.Sandbox, error) {
	resp, err := s.c.StartSandbox(ctx, &openshellv1.StartSandboxRequest{Name: name, Workspace: s.ws})
	return resp.GetSandbox(), err
}

func (s sdk) delete(ctx context.Context, name string) (bool, error) {
	resp, err := s.c.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: name, Workspace: s.ws})
	return resp.GetDeleted(), err
}

// waitFor is _wait_for_phase: GetSandbox until the phase is target; the
// ERROR phase raises.
func (s sdk) waitFor(ctx context.Context, name string, target openshellv1.SandboxPhase) (*openshellv1.Sandbox, error) {
	for ctx.Err() == nil {
		sb, err := s.get(ctx, name)
		if err != nil {
			return nil, err
		}
		switch sb.GetStatus().GetPhase() {
		case target:
			return sb, nil
		case openshellv1.SandboxPhase_SANDBOX_PHASE_ERROR:
			return nil, errors.New("sandbox " + name + " entered error phase")
		}
		time.Sleep(s.poll)
	}
	return nil, ctx.Err()
}

// waitDeleted is wait_deleted: GetSandbox until NOT_FOUND.
func (s sdk) waitDeleted(ctx context.Context, name string) error {
	for ctx.Err() == nil {
		_, err := s.get(ctx, name)
		if status.Code(err) == codes.NotFound {
			return nil
		}
		if err != nil {
			return err
		}
		time.Sleep(s.poll)
	}
	return ctx.Err()
}

// exec is SandboxClient.exec(id, command, workdir=, env=, stdin=,
// timeout_seconds=) through exec_stream: one ExecSandbox call.
func (s sdk) exec(ctx context.Context, id string, argv []string, stdin []byte) *execResult {
	return execOnce(ctx, s.c, &openshellv1.ExecSandboxRequest{SandboxId: id, Command: argv, Stdin: stdin})
}

// petnameRE is upstream's generate_routable_name: two words joined by
// '-', cut to 19 characters with no trailing '-'.
var petnameRE = regexp.MustCompile(`^[a-z]+-[a-z]*[a-z]$|^[a-z]+$`)

// TestSDKLifecycle drives a sandbox through the Python SDK's whole
// lifecycle as `with Sandbox(workspace=..., labels=...)` and its methods
// do it, over plaintext and mTLS: a generated name, wait_ready, list by
// label selector, exec (a multi-line script, stdin), stop and
// wait_stopped (exec refused, files kept), start and wait_ready, delete
// and wait_deleted; and the workspace client for a second workspace
// holding the same name. The same checks then go through ferry's own
// client.
func TestSDKLifecycle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plain bool
	}{
		{"Plaintext", true},
		{"MTLS", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := gatewaytest.Start(t, gatewaytest.Options{Plaintext: tc.plain})
			var c openshellv1.OpenShellClient
			if tc.plain {
				c, _ = dial(t, g.Addr, insecure.NewCredentials())
			} else {
				c, _ = rawClient(t, g)
			}
			ctx := ctxFor(t)
			s := sdk{c: c, ws: "default", poll: 10 * time.Millisecond}

			// Sandbox(workspace="default", labels=...).__enter__.
			sb, err := s.create(ctx, "", map[string]string{"grp": "S", "role": "primary"})
			if err != nil {
				t.Fatal(err)
			}
			name := sb.GetMetadata().GetName()
			if len(name) > 19 || !petnameRE.MatchString(name) {
				t.Fatalf("generated name %q is not in upstream's style", name)
			}
			if _, err := s.waitFor(ctx, name, openshellv1.SandboxPhase_SANDBOX_PHASE_READY); err != nil {
				t.Fatal(err)
			}
			if _, err := s.create(ctx, "second", map[string]string{"grp": "S", "role": "secondary"}); err != nil {
				t.Fatal(err)
			}
			for sel, want := range map[string][]string{
				"grp=S,role=primary": {name},
				"grp=S":              {name, "second"},
				"role=secondary,":    {"second"},
				"grp=T":              nil,
			} {
				got, err := s.list(ctx, sel)
				if err != nil {
					t.Fatalf("list %q: %v", sel, err)
				}
				if !sameNames(got, want) {
					t.Errorf("list %q = %v, want %v", sel, names(got), want)
				}
			}
			_, err = s.list(ctx, "grp=S,,=x")
			wantStatus(t, err, codes.InvalidArgument, "")

			id := sb.GetMetadata().GetId()
			r := s.exec(ctx, id, []string{"sh", "-c", "echo one >kept\necho two\ncat"}, []byte("from stdin"))
			wantExit(t, r, 0)
			if got := r.stdout.String(); got != "two\nfrom stdin" {
				t.Fatalf("exec stdout = %q", got)
			}

			if _, err := s.stop(ctx, name); err != nil {
				t.Fatal(err)
			}
			if _, err := s.waitFor(ctx, name, openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED); err != nil {
				t.Fatal(err)
			}
			wantStatus(t, s.exec(ctx, id, []string{"true"}, nil).err, codes.FailedPrecondition, "sandbox is not ready")
			if _, err := s.start(ctx, name); err != nil {
				t.Fatal(err)
			}
			if _, err := s.waitFor(ctx, name, openshellv1.SandboxPhase_SANDBOX_PHASE_READY); err != nil {
				t.Fatal(err)
			}
			r = s.exec(ctx, id, []string{"cat", "kept"}, nil)
			wantExit(t, r, 0)
			if r.stdout.String() != "one\n" {
				t.Fatalf("after stop and start: kept = %q", r.stdout.String())
			}

			// `openshell sandbox exec --tty` (crates/openshell-cli run.rs):
			// the streaming RPC, tty with the terminal's size, keys typed.
			r = execInteractive(ctx, c, &openshellv1.ExecSandboxRequest{
				SandboxId: id, Command: []string{"sh", "-c", "stty size; read x; echo got:$x; exit 5"},
				Tty: true, Cols: 100, Rows: 30,
			}, []byte("typed\r"))
			wantExit(t, r, 5)
			if out := r.stdout.String(); !strings.Contains(out, "30 100\r\n") || !strings.Contains(out, "got:typed\r\n") {
				t.Fatalf("tty exec output %q", out)
			}

			// WorkspaceClient.create(name="team"), then a sandbox of the
			// same name there.
			if _, err := c.CreateWorkspace(ctx, &openshellv1.CreateWorkspaceRequest{Name: "team"}); err != nil {
				t.Fatal(err)
			}
			team := sdk{c: c, ws: "team", poll: s.poll}
			if _, err := team.create(ctx, name, nil); err != nil {
				t.Fatalf("the same name in another workspace: %v", err)
			}
			if got, _ := team.list(ctx, "grp=S"); len(got) != 0 {
				t.Fatalf("team's list shows default's sandboxes: %v", names(got))
			}
			_, err = sdk{c: c, ws: "ghost"}.create(ctx, "x", nil)
			wantStatus(t, err, codes.NotFound, "workspace 'ghost' not found")

			// __exit__: delete, then wait_deleted.
			for _, n := range []string{name, "second"} {
				if ok, err := s.delete(ctx, n); err != nil || !ok {
					t.Fatalf("delete %s: %v, %v", n, ok, err)
				}
				if err := s.waitDeleted(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := team.get(ctx, name); err != nil {
				t.Fatalf("deleting default's %s took team's: %v", name, err)
			}

			ferryClientLifecycle(t, g)
		})
	}
}

// ferryClientLifecycle is TestSDKLifecycle's checks through ferry's own
// client: what it sends must be what a real gateway accepts.
func ferryClientLifecycle(t *testing.T, g *gatewaytest.Gateway) {
	ctx := ctxFor(t)
	c := g.Client(t, openshell.Config{})
	sb, err := c.Create(ctx, openshell.Spec{Labels: map[string]string{"grp": "F", "role": "primary"}})
	if err != nil {
		t.Fatal(err)
	}
	name := sb.Name
	if sb.Phase != "ready" {
		t.Fatalf("Create returned phase %q, want ready", sb.Phase)
	}
	if _, err := c.WaitReady(ctx, name); err != nil {
		t.Fatal(err)
	}
	got, err := c.ListSelected(ctx, "grp=F,role=primary")
	if err != nil || len(got) != 1 || got[0].Name != name || got[0].Labels["role"] != "primary" {
		t.Fatalf("ListSelected = %+v, %v; want [%s]", got, err, name)
	}
	if _, err := c.ListSelected(ctx, "=x"); !errors.Is(err, openshell.ErrInvalidRequest) {
		t.Fatalf("a bad selector: err = %v, want ErrInvalidRequest", err)
	}
	var out bytes.Buffer
	code, err := c.Exec(ctx, &relay.Command{Sandbox: name, Argv: []string{"sh", "-c", "echo one >kept\necho two"}, Stdout: &out})
	if err != nil || code != 0 || out.String() != "two\n" {
		t.Fatalf("multi-line exec: %d, %v, %q", code, err, out.String())
	}
	if st, err := c.Stop(ctx, name); err != nil || st.Phase != "stopped" {
		t.Fatalf("Stop: %v, %v", st.Phase, err)
	}
	if _, err := c.Exec(ctx, &relay.Command{Sandbox: name, Argv: []string{"true"}}); !errors.Is(err, relay.ErrNotReady) {
		t.Fatalf("exec in a stopped sandbox: err = %v, want relay.ErrNotReady", err)
	}
	if st, err := c.Start(ctx, name); err != nil || st.Phase != "ready" {
		t.Fatalf("Start: %v, %v", st.Phase, err)
	}
	out.Reset()
	if code, err := c.Exec(ctx, &relay.Command{Sandbox: name, Argv: []string{"cat", "kept"}, Stdout: &out}); err != nil || code != 0 || out.String() != "one\n" {
		t.Fatalf("after Start: %d, %v, %q", code, err, out.String())
	}
	out.Reset()
	code, err = c.Exec(ctx, &relay.Command{Sandbox: name, Argv: []string{"sh", "-c", "stty size; read x; echo got:$x; exit 5"},
		TTY: true, Size: relay.WindowSize{Cols: 100, Rows: 30}, Stdin: strings.NewReader("typed\r"), Stdout: &out})
	if err != nil || code != 5 || !strings.Contains(out.String(), "30 100\r\n") || !strings.Contains(out.String(), "got:typed\r\n") {
		t.Fatalf("tty exec through ferry's client: %d, %v, %q", code, err, out.String())
	}
	if err := c.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	settings := g.Settings
	settings.Workspace = "ghost"
	ghost, err := openshell.Dial(openshell.Config{Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ghost.Close() })
	if _, err := ghost.List(ctx); !errors.Is(err, openshell.ErrNoWorkspace) || errors.Is(err, relay.ErrNotFound) || !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("a missing workspace: err = %v, want ErrNoWorkspace naming it, not a missing sandbox", err)
	}
}

func names(sbs []*openshellv1.Sandbox) []string {
	var out []string
	for _, sb := range sbs {
		out = append(out, sb.GetMetadata().GetName())
	}
	return out
}

func sameNames(sbs []*openshellv1.Sandbox, want []string) bool {
	got := map[string]bool{}
	for _, n := range names(sbs) {
		got[n] = true
	}
	if len(got) != len(want) || len(sbs) != len(want) {
		return false
	}
	for _, n := range want {
		if !got[n] {
			return false
		}
	}
	return true
}
