package ferry_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/session"
)

// countingExecer counts execs.
type countingExecer struct {
	x relay.Execer
	n atomic.Int64
}

func (c *countingExecer) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	c.n.Add(1)
	return c.x.Exec(ctx, cmd)
}

// TestFollowSurvivesRelayDrops appends 10,000 lines over a few seconds to
// agent.ndjson in a sandbox whose gateway cuts every exec stream after
// 256 KiB, and follows it: the relay drops several times, and the local
// copy and the lines shown must still be exact, each line once, in order.
func TestFollowSurvivesRelayDrops(t *testing.T) {
	// The agent is installed through a gateway that does not cut (the
	// cache is the machine's temp dir, shared by both gateways' sandboxes).
	warm := newEnv(t, transfer.ModeAgent)
	if _, err := ferry.Upload(ctx(t), warm.sb, []string{t.TempDir()}, "warm"); err != nil {
		t.Fatal(err)
	}

	g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{CutAfter: 256 << 10}})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	counted := &countingExecer{x: c}
	sb := sandboxFor(t, counted, transfer.ModeAgent)
	meta := filepath.Join(g.Root, "box", "rascal-meta")
	if err := os.MkdirAll(meta, 0o755); err != nil {
		t.Fatal(err)
	}

	const lines = 10000
	var want bytes.Buffer
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, `{"type":"assistant","step":%d,"text":"line %d of the agent's stream, padded to look real"}`+"\n", i, i)
	}
	writerDone := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(filepath.Join(meta, "agent.ndjson"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			writerDone <- err
			return
		}
		defer f.Close()
		// 100 writes of 100 lines over about 2.5 s, some splitting a line.
		data := want.Bytes()
		step := len(data)/100 + 1
		for off := 0; off < len(data); off += step {
			if _, err := f.Write(data[off:min(off+step, len(data))]); err != nil {
				writerDone <- err
				return
			}
			time.Sleep(25 * time.Millisecond)
		}
		writerDone <- os.WriteFile(filepath.Join(meta, "done"), nil, 0o644)
	}()

	out := t.TempDir()
	var shown bytes.Buffer
	err := ferry.Follow(ctx(t), sb, ferry.FollowSpec{Out: out, Lines: &shown, StopWhen: "done"})
	if werr := <-writerDone; werr != nil {
		t.Fatal(werr)
	}
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	got, _ := os.ReadFile(filepath.Join(out, "agent.ndjson"))
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("local agent.ndjson: %d bytes, want %d (equal prefix: %v)", len(got), want.Len(), bytes.HasPrefix(want.Bytes(), got))
	}
	if !bytes.Equal(shown.Bytes(), want.Bytes()) {
		gl := strings.Count(shown.String(), "\n")
		t.Fatalf("shown %d lines (%d bytes), want %d lines exactly once in order", gl, shown.Len(), lines)
	}
	if n := counted.n.Load(); n < 3 {
		t.Fatalf("%d execs: the relay should have dropped at least twice", n)
	}
	t.Logf("%d execs for %d bytes through a relay cut every 256 KiB", counted.n.Load(), want.Len())
}

// TestRunExecCountAgentMode: with the agent cached, a run with inputs, a
// secret and a session takes one agent exec, kept open from before the
// command to after it, and the command's (DESIGN.md, "Few round trips").
func TestRunExecCountAgentMode(t *testing.T) {
	warmAgent(t)
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	counted := &countingExecer{x: c}
	sb := sandboxFor(t, counted, transfer.ModeAgent)
	st, err := session.New(session.Config{Backend: mustDirBackend(t)})
	if err != nil {
		t.Fatal(err)
	}
	// A snapshot to restore, so that the run does restore one.
	seed := t.TempDir()
	write(t, seed, map[string]string{"t": "earlier\n"})
	if _, err := st.Save(ctx(t), "task-1", &session.DirSource{Dir: seed}); err != nil {
		t.Fatal(err)
	}
	local := t.TempDir()
	write(t, local, map[string]string{"instructions.md": "do it", "context.json": "{}", "gh_token": "tok"})
	res, err := ferry.Run(ctx(t), sb, ferry.RunSpec{
		Inputs: []ferry.Mapping{
			{Local: filepath.Join(local, "instructions.md"), Remote: "rascal-meta/instructions.md"},
			{Local: filepath.Join(local, "context.json"), Remote: "rascal-meta/context.json"},
		},
		Secrets:  []ferry.Mapping{{Local: filepath.Join(local, "gh_token"), Remote: ".rascal-secrets/gh_token"}},
		Argv:     []string{"sh", "-c", `mkdir -p sess && echo x >> sess/t && echo '{"exit_code":0}' > rascal-meta/meta.json`},
		Out:      filepath.Join(t.TempDir(), "run"),
		Sessions: []ferry.SessionMapping{{Key: "task-1", Remote: "sess"}},
		Store:    st,
	})
	if err != nil || res.PullErr != nil || res.SessionErr != nil {
		t.Fatalf("run: %v, pull: %v, session: %v", err, res.PullErr, res.SessionErr)
	}
	if s := res.Sessions[0]; s.Restored == nil || s.Restored.Snapshot != 1 || s.Saved == nil || s.Saved.Snapshot != 2 {
		t.Fatalf("session: %+v", s)
	}
	if n := counted.n.Load(); n != 2 {
		t.Fatalf("%d execs, want 2: the agent's, kept from before the command to after it, and the command", n)
	}
	fi, err := os.Stat(filepath.Join(g.Root, "box", ".rascal-secrets"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("secrets dir: %v %v, want 0700", fi, err)
	}
}
