package gateway_test

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"

	datamodelv1 "github.com/ferry-dev/ferry/proto/openshell/datamodel/v1"
	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
)

// TestWorkspaceRequests covers the workspace RPCs' answers and refusals,
// each upstream's (grpc/workspace.rs and its tests, e2e/python
// test_workspace_api.py).
func TestWorkspaceRequests(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c, _ := rawClient(t, g)
	ctx := ctxFor(t)
	resp, err := c.CreateWorkspace(ctx, &openshellv1.CreateWorkspaceRequest{Name: "team-a", Labels: map[string]string{"team": "infra"}})
	if err != nil {
		t.Fatal(err)
	}
	ws := resp.GetWorkspace()
	if m := ws.GetMetadata(); m.GetName() != "team-a" || m.GetId() == "" || m.GetCreatedAtMs() == 0 || m.GetResourceVersion() == 0 ||
		m.GetLabels()["team"] != "infra" || m.GetDeletionTimestampMs() != 0 || ws.GetStatus().GetPhase() != datamodelv1.WorkspacePhase_WORKSPACE_PHASE_ACTIVE {
		t.Fatalf("CreateWorkspace = %v", ws)
	}
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"CreateDuplicate", createWS(ctx, c, "team-a", nil), codes.AlreadyExists, "workspace already exists"},
		{"CreateDefault", createWS(ctx, c, "default", nil), codes.AlreadyExists, "workspace already exists"},
		{"CreateNoName", createWS(ctx, c, "", nil), codes.InvalidArgument, "workspace name is required"},
		{"CreateUppercase", createWS(ctx, c, "MyWorkspace", nil), codes.InvalidArgument, "workspace name must contain only lowercase alphanumeric characters or hyphens"},
		{"CreateLeadingHyphen", createWS(ctx, c, "-ws", nil), codes.InvalidArgument, "workspace name must not start or end with a hyphen"},
		{"CreateDoubleHyphen", createWS(ctx, c, "team--ml", nil), codes.InvalidArgument, "workspace name must not contain consecutive hyphens"},
		{"CreateTooLong", createWS(ctx, c, strings.Repeat("a", 20), nil), codes.InvalidArgument, "workspace name exceeds maximum length (20 > 19)"},
		{"CreateMaxLength", createWS(ctx, c, strings.Repeat("a", 19), nil), codes.OK, ""},
		{"CreateBadLabel", createWS(ctx, c, "labelled", map[string]string{"bad key": "v"}), codes.InvalidArgument, "label key name segment contains invalid characters"},
		{"GetNoName", func() error {
			_, err := c.GetWorkspace(ctx, &openshellv1.GetWorkspaceRequest{})
			return err
		}, codes.InvalidArgument, "name is required"},
		{"GetUnknown", func() error {
			_, err := c.GetWorkspace(ctx, &openshellv1.GetWorkspaceRequest{Name: "ghost"})
			return err
		}, codes.NotFound, "workspace not found"},
		{"ListBadSelector", func() error {
			_, err := c.ListWorkspaces(ctx, &openshellv1.ListWorkspacesRequest{LabelSelector: "novalue"})
			return err
		}, codes.InvalidArgument, "invalid label selector"},
		{"DeleteNoName", func() error {
			_, err := c.DeleteWorkspace(ctx, &openshellv1.DeleteWorkspaceRequest{})
			return err
		}, codes.InvalidArgument, "name is required"},
		{"DeleteDefault", func() error {
			_, err := c.DeleteWorkspace(ctx, &openshellv1.DeleteWorkspaceRequest{Name: "default"})
			return err
		}, codes.FailedPrecondition, "the default workspace cannot be deleted"},
		{"DeleteUnknown", func() error {
			_, err := c.DeleteWorkspace(ctx, &openshellv1.DeleteWorkspaceRequest{Name: "ghost"})
			return err
		}, codes.NotFound, "workspace 'ghost' not found"},
		{"CreateSandboxUnknown", func() error {
			_, err := c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "box", Workspace: "ghost"})
			return err
		}, codes.NotFound, "workspace 'ghost' not found"},
		{"GetSandboxUnknown", func() error {
			_, err := c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "box", Workspace: "ghost"})
			return err
		}, codes.NotFound, "workspace 'ghost' not found"},
		{"ListSandboxesUnknown", func() error {
			_, err := c.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{Workspace: "ghost"})
			return err
		}, codes.NotFound, "workspace 'ghost' not found"},
		{"ListSandboxesBoth", func() error {
			_, err := c.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{Workspace: "default", AllWorkspaces: true})
			return err
		}, codes.InvalidArgument, "all_workspaces and workspace are mutually exclusive"},
		{"DeleteSandboxUnknown", func() error {
			_, err := c.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: "box", Workspace: "ghost"})
			return err
		}, codes.NotFound, "workspace 'ghost' not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if tc.code == codes.OK {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantStatus(t, err, tc.code, tc.msg)
		})
	}

	got, err := c.GetWorkspace(ctx, &openshellv1.GetWorkspaceRequest{Name: "team-a"})
	if err != nil || got.GetWorkspace().GetMetadata().GetLabels()["team"] != "infra" {
		t.Fatalf("GetWorkspace team-a = %v, %v", got, err)
	}
	for _, tc := range []struct {
		req  *openshellv1.ListWorkspacesRequest
		want []string
	}{
		{&openshellv1.ListWorkspacesRequest{}, []string{"default", "team-a", strings.Repeat("a", 19)}},
		{&openshellv1.ListWorkspacesRequest{LabelSelector: "team=infra"}, []string{"team-a"}},
		{&openshellv1.ListWorkspacesRequest{Limit: 1, Offset: 1}, []string{"team-a"}},
		{&openshellv1.ListWorkspacesRequest{Offset: 5}, nil},
	} {
		list, err := c.ListWorkspaces(ctx, tc.req)
		var names []string
		for _, w := range list.GetWorkspaces() {
			names = append(names, w.GetMetadata().GetName())
		}
		if err != nil || !slices.Equal(names, tc.want) {
			t.Fatalf("ListWorkspaces %v = %v, %v; want %v", tc.req, names, err, tc.want)
		}
	}
}

func createWS(ctx context.Context, c openshellv1.OpenShellClient, name string, labels map[string]string) func() error {
	return func() error {
		_, err := c.CreateWorkspace(ctx, &openshellv1.CreateWorkspaceRequest{Name: name, Labels: labels})
		return err
	}
}

// TestWorkspaceSandboxes runs sandboxes of one name in two workspaces,
// each in its own directory, and deletes a workspace as upstream does: a
// delete refused because a sandbox remains leaves the workspace
// TERMINATING, closed to new sandboxes, and the next delete once it is
// empty removes it. Workspaces and their sandboxes outlive a restart.
func TestWorkspaceSandboxes(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c, _ := rawClient(t, g)
	ctx := ctxFor(t)
	if _, err := c.CreateWorkspace(ctx, &openshellv1.CreateWorkspaceRequest{Name: "team-a"}); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, ws := range []string{"", "team-a"} {
		sb := createReady(t, c, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "box", Workspace: ws})
		if got := sb.GetMetadata().GetWorkspace(); got != cmp.Or(ws, "default") {
			t.Fatalf("sandbox box of %q is in workspace %q", ws, got)
		}
		ids[cmp.Or(ws, "default")] = sb.GetMetadata().GetId()
		r := execOnce(ctx, c, &openshellv1.ExecSandboxRequest{SandboxId: sb.GetMetadata().GetId(), Command: []string{"sh", "-c", "pwd; echo " + cmp.Or(ws, "default") + " > whose"}})
		wantExit(t, r, 0)
	}
	for ws, dir := range map[string]string{"default": filepath.Join(g.Root, "box"), "team-a": filepath.Join(g.Root, ".ws", "team-a", "box")} {
		if b, err := os.ReadFile(filepath.Join(dir, "whose")); err != nil || string(b) != ws+"\n" {
			t.Fatalf("%s/whose = %q, %v; want %s's", dir, b, err, ws)
		}
	}
	listNames := func(req *openshellv1.ListSandboxesRequest) []string {
		t.Helper()
		list, err := c.ListSandboxes(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, sb := range list.GetSandboxes() {
			names = append(names, sb.GetMetadata().GetWorkspace()+"/"+sb.GetMetadata().GetName())
		}
		return names
	}
	if got := listNames(&openshellv1.ListSandboxesRequest{Workspace: "team-a"}); !slices.Equal(got, []string{"team-a/box"}) {
		t.Fatalf("ListSandboxes team-a = %v", got)
	}
	if got := listNames(&openshellv1.ListSandboxesRequest{AllWorkspaces: true}); !slices.Equal(got, []string{"default/box", "team-a/box"}) {
		t.Fatalf("ListSandboxes all = %v", got)
	}

	// A gateway started again on the root knows both workspaces and both
	// sandboxes. (It only reads while this test goes on with the first.)
	again, _ := rawClient(t, gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{Root: g.Root}}))
	if list, err := again.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{Workspace: "team-a"}); err != nil || len(list.GetSandboxes()) != 1 ||
		list.GetSandboxes()[0].GetMetadata().GetId() != ids["team-a"] {
		t.Fatalf("restarted: ListSandboxes team-a = %v, %v; want box %s", list, err, ids["team-a"])
	}
	if sb, err := again.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "box"}); err != nil || sb.GetSandbox().GetMetadata().GetId() != ids["default"] {
		t.Fatalf("restarted: GetSandbox default/box = %v, %v; want %s", sb, err, ids["default"])
	}

	_, err := c.DeleteWorkspace(ctx, &openshellv1.DeleteWorkspaceRequest{Name: "team-a"})
	wantStatus(t, err, codes.FailedPrecondition, "workspace 'team-a' still contains resources: sandbox")
	w, err := c.GetWorkspace(ctx, &openshellv1.GetWorkspaceRequest{Name: "team-a"})
	if err != nil || w.GetWorkspace().GetStatus().GetPhase() != datamodelv1.WorkspacePhase_WORKSPACE_PHASE_TERMINATING || w.GetWorkspace().GetMetadata().GetDeletionTimestampMs() == 0 {
		t.Fatalf("after a refused delete: %v, %v; want TERMINATING", w, err)
	}
	_, err = c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "late", Workspace: "team-a"})
	wantStatus(t, err, codes.FailedPrecondition, "workspace 'team-a' is being deleted")
	// What is there stays reachable.
	if _, err := c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "box", Workspace: "team-a"}); err != nil {
		t.Fatalf("GetSandbox in a terminating workspace: %v", err)
	}
	if _, err := c.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: "box", Workspace: "team-a"}); err != nil {
		t.Fatal(err)
	}
	if del, err := c.DeleteWorkspace(ctx, &openshellv1.DeleteWorkspaceRequest{Name: "team-a"}); err != nil || !del.GetDeleted() {
		t.Fatalf("DeleteWorkspace of the emptied workspace = %v, %v", del, err)
	}
	_, err = c.GetWorkspace(ctx, &openshellv1.GetWorkspaceRequest{Name: "team-a"})
	wantStatus(t, err, codes.NotFound, "workspace not found")
	if _, err := os.Stat(filepath.Join(g.Root, ".ws", "team-a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("deleted workspace's directory: %v", err)
	}
	// The default workspace's box was never touched.
	if got := listNames(&openshellv1.ListSandboxesRequest{AllWorkspaces: true}); !slices.Equal(got, []string{"default/box"}) {
		t.Fatalf("ListSandboxes all after the delete = %v", got)
	}
	// And the name is free again in a new workspace of the old name.
	if _, err := c.CreateWorkspace(ctx, &openshellv1.CreateWorkspaceRequest{Name: "team-a"}); err != nil {
		t.Fatal(err)
	}
	createReady(t, c, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "box", Workspace: "team-a"})
}

// TestWorkspaceOldRoot starts a gateway on a root that a gateway before
// workspaces left: records named by sandbox, every sandbox in root/<name>,
// one in a workspace never created. Each loads, in its workspace, with its
// files.
func TestWorkspaceOldRoot(t *testing.T) {
	root := t.TempDir()
	meta := filepath.Join(root, ".gateway")
	for _, sb := range []struct{ id, name, ws string }{
		{"11111111-1111-4111-8111-111111111111", "dbox", "default"},
		{"22222222-2222-4222-8222-222222222222", "obox", "legacy"},
	} {
		if err := os.MkdirAll(filepath.Join(root, sb.name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, sb.name, "mine"), []byte(sb.ws), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := protojson.Marshal(&openshellv1.Sandbox{
			Metadata: &datamodelv1.ObjectMeta{Id: sb.id, Name: sb.name, Workspace: sb.ws, CreatedAtMs: 1},
			Spec:     &openshellv1.SandboxSpec{},
			Status:   &openshellv1.SandboxStatus{SandboxName: sb.name, Phase: openshellv1.SandboxPhase_SANDBOX_PHASE_READY},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(meta, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(meta, sb.name+".json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{Root: root}})
	c, _ := rawClient(t, g)
	ctx := ctxFor(t)
	for _, tc := range []struct{ name, ws string }{{"dbox", "default"}, {"obox", "legacy"}} {
		sb, err := c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: tc.name, Workspace: tc.ws})
		if err != nil {
			t.Fatalf("GetSandbox %s/%s: %v", tc.ws, tc.name, err)
		}
		r := execOnce(ctx, c, &openshellv1.ExecSandboxRequest{SandboxId: sb.GetSandbox().GetMetadata().GetId(), Command: []string{"cat", "mine"}})
		wantExit(t, r, 0)
		if r.stdout.String() != tc.ws {
			t.Fatalf("%s/%s reads %q, want its own file", tc.ws, tc.name, r.stdout.String())
		}
		if _, err := os.Stat(filepath.Join(meta, tc.name+".json")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("old record of %s still there: %v", tc.name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, ".ws", "legacy", "obox", "mine")); err != nil {
		t.Fatalf("legacy's sandbox not moved to its workspace: %v", err)
	}
	if _, err := c.GetWorkspace(ctx, &openshellv1.GetWorkspaceRequest{Name: "legacy"}); err != nil {
		t.Fatalf("the old sandbox's workspace: %v", err)
	}
	// Its name is now free in the default workspace.
	createReady(t, c, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "obox"})
}

// petNameRE: two words, or one where the cut fell on the '-'.
var petNameRE = regexp.MustCompile(`^[a-z]+(-[a-z]+)?$`)

// TestGeneratedNames creates sandboxes without a name: each gets two words
// joined by '-', as upstream's petname, a valid name, unique within its
// workspace.
func TestGeneratedNames(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c, _ := rawClient(t, g)
	ctx := ctxFor(t)
	if _, err := c.CreateWorkspace(ctx, &openshellv1.CreateWorkspaceRequest{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	for _, ws := range []string{"default", "other"} {
		seen := map[string]bool{}
		for range 30 {
			resp, err := c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Workspace: ws})
			if err != nil {
				t.Fatal(err)
			}
			name := resp.GetSandbox().GetMetadata().GetName()
			if len(name) > 19 || !petNameRE.MatchString(name) || strings.HasSuffix(name, "-") || seen[name] {
				t.Fatalf("generated name %q in %s (seen before: %v)", name, ws, seen[name])
			}
			seen[name] = true
			// The name it was given is the name it answers to.
			if _, err := c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: name, Workspace: ws}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestListSandboxesLimit: a limit of 0 is upstream's default page of 100.
func TestListSandboxesLimit(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c, _ := rawClient(t, g)
	ctx := ctxFor(t)
	for range 101 {
		if _, err := c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		req  *openshellv1.ListSandboxesRequest
		want int
	}{
		{&openshellv1.ListSandboxesRequest{}, 100},
		{&openshellv1.ListSandboxesRequest{AllWorkspaces: true}, 100},
		{&openshellv1.ListSandboxesRequest{Limit: 200}, 101},
		{&openshellv1.ListSandboxesRequest{Offset: 100}, 1},
	} {
		list, err := c.ListSandboxes(ctx, tc.req)
		if err != nil || len(list.GetSandboxes()) != tc.want {
			t.Fatalf("ListSandboxes %v: %d sandboxes, %v; want %d", tc.req, len(list.GetSandboxes()), err, tc.want)
		}
	}
}
