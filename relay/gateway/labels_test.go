package gateway_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
)

// TestLabelSelectors replays upstream's e2e test_sandbox_labels_and_selectors
// over the wire, with requests shaped as upstream's Python SDK shapes them
// (SandboxClient.create and .list), in plaintext and over mTLS.
func TestLabelSelectors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		plaintext bool
	}{{"plaintext", true}, {"mtls", false}} {
		t.Run(tc.name, func(t *testing.T) {
			g := gatewaytest.Start(t, gatewaytest.Options{Plaintext: tc.plaintext})
			c := labelClient(t, g, tc.plaintext)
			ctx := ctxFor(t)

			create := func(ws, name string, labels map[string]string) {
				t.Helper()
				// SandboxClient.create: an empty spec, labels or {}.
				if _, err := c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{
					Spec: &openshellv1.SandboxSpec{}, Name: name, Labels: labels, Workspace: ws,
				}); err != nil {
					t.Fatalf("CreateSandbox %s: %v", name, err)
				}
			}
			list := func(req *openshellv1.ListSandboxesRequest) ([]string, error) {
				t.Helper()
				resp, err := c.ListSandboxes(ctx, req)
				var names []string
				for _, sb := range resp.GetSandboxes() {
					names = append(names, sb.GetMetadata().GetName())
				}
				sort.Strings(names)
				return names, err
			}
			// SandboxClient.list: limit 100, offset 0, selector or "".
			selected := func(sel string) []string {
				t.Helper()
				names, err := list(&openshellv1.ListSandboxesRequest{Workspace: "default", Limit: 100, LabelSelector: sel})
				if err != nil {
					t.Fatalf("ListSandboxes %q: %v", sel, err)
				}
				return names
			}
			wantNames := func(sel string, want ...string) {
				t.Helper()
				if got := selected(sel); !reflect.DeepEqual(got, want) {
					t.Fatalf("ListSandboxes %q = %v, want %v", sel, got, want)
				}
			}

			create("default", "lbl-a-s1", map[string]string{"aiq-test": "s1", "role": "primary"})
			create("default", "lbl-b-s1", map[string]string{"aiq-test": "s1", "role": "secondary"})
			create("default", "plain", nil)
			create("default", "prefixed", map[string]string{"example.com/tier": "web", "empty": ""})
			if _, err := c.CreateWorkspace(ctx, &openshellv1.CreateWorkspaceRequest{Name: "other"}); err != nil {
				t.Fatalf("CreateWorkspace other: %v", err)
			}
			create("other", "lbl-c-s1", map[string]string{"aiq-test": "s1", "role": "primary"})

			got, err := c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "lbl-a-s1", Workspace: "default"})
			if err != nil || got.GetSandbox().GetMetadata().GetLabels()["role"] != "primary" {
				t.Fatalf("GetSandbox lbl-a-s1 = %v, %v; want label role=primary", got, err)
			}

			wantNames("aiq-test=s1,role=primary", "lbl-a-s1")
			wantNames("aiq-test=s1", "lbl-a-s1", "lbl-b-s1")
			wantNames("aiq-test=s1, role=secondary,", "lbl-b-s1")
			wantNames("aiq-test=s2")
			wantNames("example.com/tier=web", "prefixed")
			wantNames("empty=", "prefixed")
			wantNames("role=")
			wantNames("", "lbl-a-s1", "lbl-b-s1", "plain", "prefixed")
			wantNames(",", "lbl-a-s1", "lbl-b-s1", "plain", "prefixed")

			// The page is cut from the filtered list.
			names, err := list(&openshellv1.ListSandboxesRequest{Workspace: "default", Limit: 1, Offset: 1, LabelSelector: "aiq-test=s1"})
			if err != nil || !reflect.DeepEqual(names, []string{"lbl-b-s1"}) {
				t.Fatalf("ListSandboxes page 2 of aiq-test=s1 = %v, %v; want [lbl-b-s1]", names, err)
			}
			// SandboxClient.list_for_all_workspaces.
			names, err = list(&openshellv1.ListSandboxesRequest{AllWorkspaces: true, Limit: 100, LabelSelector: "role=primary"})
			if err != nil || !reflect.DeepEqual(names, []string{"lbl-a-s1", "lbl-c-s1"}) {
				t.Fatalf("ListSandboxes all workspaces role=primary = %v, %v; want [lbl-a-s1 lbl-c-s1]", names, err)
			}

			// Deleting one removes only it from the selector's results.
			if del, err := c.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: "lbl-a-s1", Workspace: "default"}); err != nil || !del.GetDeleted() {
				t.Fatalf("DeleteSandbox lbl-a-s1 = %v, %v", del, err)
			}
			wantNames("aiq-test=s1", "lbl-b-s1")

			for _, bad := range []struct{ sel, msg string }{
				{"env:prod", "invalid label selector: expected 'key=value', got 'env:prod'"},
				{"=prod", "invalid label selector: key cannot be empty in '=prod'"},
				{"-app=prod", "label key name segment must start with alphanumeric character: '-app'"},
				{"env=-prod", "label value must start with alphanumeric character: '-prod'"},
				{"Example.com/app=x", "label key prefix must be a DNS subdomain"},
			} {
				_, err := list(&openshellv1.ListSandboxesRequest{Workspace: "default", Limit: 100, LabelSelector: bad.sel})
				wantStatus(t, err, codes.InvalidArgument, bad.msg)
				_, err = list(&openshellv1.ListSandboxesRequest{AllWorkspaces: true, Limit: 100, LabelSelector: bad.sel})
				wantStatus(t, err, codes.InvalidArgument, bad.msg)
			}
		})
	}
}

// TestCreateRefusesBadLabels checks that a sandbox with a label upstream
// would refuse is not created: no record, no directory.
func TestCreateRefusesBadLabels(t *testing.T) {
	for _, tc := range []struct {
		plaintext bool
		name      string
		labels    map[string]string
		msg       string
	}{
		{true, "bad-value", map[string]string{"team": "-x"}, "label value must start with alphanumeric character: '-x'"},
		{false, "bad-long", map[string]string{"team": strings.Repeat("x", 512)}, "label value exceeds 63 characters"},
		{true, "bad-key", map[string]string{"app@name": "x"}, "label key name segment contains invalid characters"},
		{false, "bad-empty", map[string]string{"": "x"}, "label key cannot be empty"},
		{true, "bad-prefix", map[string]string{"example..com/app": "x"}, "label key prefix cannot contain consecutive dots"},
		{false, "bad-many", map[string]string{"ok": "fine", "k": "a b"}, "label value contains invalid characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := gatewaytest.Start(t, gatewaytest.Options{Plaintext: tc.plaintext})
			c := labelClient(t, g, tc.plaintext)
			ctx := ctxFor(t)
			_, err := c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: tc.name, Labels: tc.labels, Workspace: "default"})
			wantStatus(t, err, codes.InvalidArgument, tc.msg)

			_, err = c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: tc.name, Workspace: "default"})
			wantStatus(t, err, codes.NotFound, "sandbox not found")
			resp, err := c.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{AllWorkspaces: true})
			if err != nil || len(resp.GetSandboxes()) != 0 {
				t.Fatalf("ListSandboxes after a refused create = %v, %v; want none", resp.GetSandboxes(), err)
			}
			if _, err := os.Stat(filepath.Join(g.Root, tc.name)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("sandbox dir after a refused create: %v, want none", err)
			}
			// The name is still free.
			if _, err := c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: tc.name, Workspace: "default"}); err != nil {
				t.Fatalf("CreateSandbox %s without labels after the refusal: %v", tc.name, err)
			}
		})
	}
}

func labelClient(t *testing.T, g *gatewaytest.Gateway, plaintext bool) openshellv1.OpenShellClient {
	t.Helper()
	if plaintext {
		c, _ := dial(t, g.Addr, insecure.NewCredentials())
		return c
	}
	c, _ := rawClient(t, g)
	return c
}
