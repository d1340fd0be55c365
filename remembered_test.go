package ferry_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/session/treediff"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// TestRememberedAgentGone: in auto mode, a sandbox the agent memory has
// (so its first calls go before the agent's hello) where the agent can no
// longer run (here: no build for its machine) is copied to and from in
// POSIX mode, as a sandbox Open finds so at once would be, and forgotten.
// Without the memory the same sandbox is POSIX mode from Open; with it,
// the early client's first call is what finds out.
func TestRememberedAgentGone(t *testing.T) {
	// A temp directory of its own: no agent another test cached.
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.SandboxEnv(t, c, "box", map[string]string{"TMPDIR": t.TempDir()})
	e := env{sb: sandboxFor(t, c, transfer.ModeAuto), root: filepath.Join(g.Root, "box")}
	write(t, e.root, map[string]string{"work/f": "remote\n", "rascal-meta/meta.json": `{"exit_code":0}`})
	src := t.TempDir()
	write(t, src, map[string]string{"up": "local\n"})

	// This machine's build carried under the other machine's name only.
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	bin := agenttest.Bundle(t)[runtime.GOARCH]
	bin.Arch = other
	e.sb.Agents = agent.Bundle{other: bin}

	for _, tc := range []struct {
		name string
		op   func(sb ferry.Sandbox) (mode string, err error)
	}{
		{"Download", func(sb ferry.Sandbox) (string, error) {
			dst := t.TempDir()
			st, err := ferry.Download(ctx(t), sb, []string{"work/f"}, dst, archive.DefaultLimits())
			if err == nil {
				sameTree(t, tree(t, dst), map[string]string{"f": "remote\n"})
			}
			return st.Mode, err
		}},
		{"Upload", func(sb ferry.Sandbox) (string, error) {
			st, err := ferry.Upload(ctx(t), sb, []string{filepath.Join(src, "up")}, "work/up")
			if err == nil {
				if b, rerr := os.ReadFile(filepath.Join(e.root, "work", "up")); rerr != nil || string(b) != "local\n" {
					t.Fatalf("uploaded %q, %v", b, rerr)
				}
			}
			return st.Mode, err
		}},
		{"Pull", func(sb ferry.Sandbox) (string, error) {
			res, err := ferry.Pull(ctx(t), sb, ferry.PullSpec{Out: t.TempDir()})
			if errors.Is(err, ferry.ErrNoMeta) {
				err = nil
			}
			return res.Mode, err
		}},
		{"Manifest", func(sb ferry.Sandbox) (string, error) {
			m, err := ferry.Manifest(ctx(t), sb, "work", treediff.Options{})
			if err != nil {
				return "", err
			}
			if !m.MovedContents {
				return "agent", nil
			}
			return "posix", nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := e.sb
			sb.AgentMemory = agent.NewMemory()
			sb.AgentMemory.Remember(sb.Name, true)
			mode, err := tc.op(sb)
			if err != nil {
				t.Fatalf("remembered sandbox without the agent: %v, want it done in POSIX mode", err)
			}
			if mode != "posix" {
				t.Fatalf("done in %q mode, want posix", mode)
			}
			if sb.AgentMemory.Answered(sb.Name) {
				t.Fatal("the sandbox is still remembered")
			}
		})
	}
}
