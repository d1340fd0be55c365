package ferry_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/treediff"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// TestRememberedAgentGone: in auto mode, a sandbox the agent memory has
// (so its first calls go before the agent's hello) where the agent can no
// longer run (here: no build for its machine) is copied to and from, and
// its sessions saved and restored and a run made in it, in POSIX mode, as
// for a sandbox Open finds so at once, and it is forgotten.
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
	// A snapshot to restore, saved in POSIX mode.
	st, _ := newStore(t, nil)
	posix := e.sb
	posix.Mode = transfer.ModePOSIX
	write(t, e.root, map[string]string{"sess/a": "session\n"})
	if _, err := ferry.SaveSession(ctx(t), posix, st, session.SaveSpec{Key: "task", Dir: "sess"}); err != nil {
		t.Fatal(err)
	}

	// This machine's build carried under the other machine's name only.
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	bin := agenttest.Bundle(t)[runtime.GOARCH]
	bin.Arch = other
	e.sb.Agents = agent.Bundle{other: bin}

	for _, tc := range []struct {
		name string
		op   func(t *testing.T, sb ferry.Sandbox) (mode string, err error)
	}{
		{"Download", func(t *testing.T, sb ferry.Sandbox) (string, error) {
			dst := t.TempDir()
			st, err := ferry.Download(ctx(t), sb, []string{"work/f"}, dst, archive.DefaultLimits())
			if err == nil {
				sameTree(t, tree(t, dst), map[string]string{"f": "remote\n"})
			}
			return st.Mode, err
		}},
		{"Upload", func(t *testing.T, sb ferry.Sandbox) (string, error) {
			st, err := ferry.Upload(ctx(t), sb, []string{filepath.Join(src, "up")}, "work/up")
			if err == nil {
				if b, rerr := os.ReadFile(filepath.Join(e.root, "work", "up")); rerr != nil || string(b) != "local\n" {
					t.Fatalf("uploaded %q, %v", b, rerr)
				}
			}
			return st.Mode, err
		}},
		{"Pull", func(t *testing.T, sb ferry.Sandbox) (string, error) {
			res, err := ferry.Pull(ctx(t), sb, ferry.PullSpec{Out: t.TempDir()})
			if errors.Is(err, ferry.ErrNoMeta) {
				err = nil
			}
			return res.Mode, err
		}},
		{"SaveSession", func(t *testing.T, sb ferry.Sandbox) (string, error) {
			res, err := ferry.SaveSession(ctx(t), sb, st, session.SaveSpec{Key: "saved", Dir: "sess"})
			if err == nil && (res.Snapshot != 1 || res.Files != 1) {
				t.Fatalf("saved %+v, want snapshot 1 of the one file", res)
			}
			return res.Mode, err
		}},
		{"RestoreSession", func(t *testing.T, sb ferry.Sandbox) (string, error) {
			res, err := ferry.RestoreSession(ctx(t), sb, st, session.RestoreSpec{Key: "task", Dir: "restored"})
			if err == nil {
				sameTree(t, tree(t, filepath.Join(e.root, "restored")), map[string]string{"a": "session\n"})
			}
			return res.Mode, err
		}},
		{"Run", func(t *testing.T, sb ferry.Sandbox) (string, error) {
			out := t.TempDir()
			res, err := ferry.Run(ctx(t), sb, ferry.RunSpec{
				Inputs:   []ferry.Mapping{{Local: filepath.Join(src, "up"), Remote: "work/in"}},
				Argv:     []string{"sh", "-c", `cp work/in run-sess/in && cat run-sess/a`},
				Out:      out,
				Sessions: []ferry.SessionMapping{{Key: "task", Remote: "run-sess"}},
				Store:    st,
			})
			if err != nil || res.ExitCode != 0 {
				return "", fmt.Errorf("run: exit %d: %w", res.ExitCode, err)
			}
			if res.PullErr != nil || res.SessionErr != nil {
				t.Fatalf("pull: %v, session: %v", res.PullErr, res.SessionErr)
			}
			if log, err := os.ReadFile(filepath.Join(out, "runner.log")); err != nil || string(log) != "session\n" {
				t.Fatalf("runner.log %q, %v: the command did not see the restored session", log, err)
			}
			saved := res.Sessions[0].Saved
			if saved == nil || saved.Files != 2 {
				t.Fatalf("session %+v: want the input saved beside the restored file", res.Sessions[0])
			}
			if m := res.Sessions[0].Restored.Mode; m != saved.Mode || m != res.Pull.Mode {
				t.Fatalf("restored in %q mode, saved in %q, pulled in %q: want one mode", m, saved.Mode, res.Pull.Mode)
			}
			return saved.Mode, nil
		}},
		{"Manifest", func(t *testing.T, sb ferry.Sandbox) (string, error) {
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
			mode, err := tc.op(t, sb)
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
