package ferry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
)

// logsScript stands for a worker that logs as it goes: LINES times, every
// EVERY seconds, a line on stdout (runner.log) and one in agent.ndjson,
// each with the nanosecond it was written (PAD adds that many random
// bytes, in hex, to the latter). At line TRUNC_AT, TRUNCS times (default
// 1), it waits for the file trunc-<n>, truncates agent.ndjson (with
// REGROW it writes 40 new lines into it at once), and says so in
// truncated-<n>; without REGROW it then waits for the file resume with
// the file empty. WAIT_FOR holds it before meta.json and its exit; with
// RM_AT_END it then removes agent.ndjson.
const logsScript = `i=0
while [ $i -lt "${LINES:-20}" ]; do
  pad=""
  if [ -n "$PAD" ]; then pad=$(head -c "$PAD" /dev/urandom | od -An -tx1 | tr -d ' \n'); fi
  echo "runner $i $(date +%s%N)"
  printf '{"i":%d,"t":%s,"pad":"%s"}\n' $i "$(date +%s%N)" "$pad" >> "$RASCAL_META_DIR/agent.ndjson"
  if [ -n "$TRUNC_AT" ] && [ $i -eq "$TRUNC_AT" ]; then
    n=1
    while [ $n -le "${TRUNCS:-1}" ]; do
      while [ ! -e trunc-$n ]; do sleep 0.02; done
      : > "$RASCAL_META_DIR/agent.ndjson"
      if [ -n "$REGROW" ]; then
        j=0; while [ $j -lt 40 ]; do echo "NEW content of generation $n, line $j" >> "$RASCAL_META_DIR/agent.ndjson"; j=$((j+1)); done
      fi
      echo done > truncated-$n
      n=$((n+1))
    done
    if [ -z "$REGROW" ]; then while [ ! -e resume ]; do sleep 0.02; done; fi
  fi
  i=$((i+1))
  sleep "${EVERY:-0.1}"
done
if [ -n "$WAIT_FOR" ]; then while [ ! -e "$WAIT_FOR" ]; do sleep 0.05; done; fi
if [ -n "$RM_AT_END" ]; then rm -f "$RASCAL_META_DIR/agent.ndjson"; fi
echo "{\"run_id\":\"$RASCAL_RUN_ID\",\"exit_code\":0}" > "$RASCAL_META_DIR/meta.json"
echo "worker: done"`

// logBuffer collects a Launcher's log records.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newLogsLauncher is a Launcher whose log records, Debug included, land
// in the returned buffer; mod adjusts its configuration.
func newLogsLauncher(t *testing.T, x relay.Execer, c *openshell.Client, runs string, st *session.Store, mod func(*ferry.LauncherConfig)) (*ferry.Launcher, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	cfg := ferry.LauncherConfig{
		Sandboxes: c, X: x, RunsDir: runs, Store: st, Agents: agenttest.Bundle(t), Mode: transfer.ModeAgent,
		KillGrace: 500 * time.Millisecond,
		Logger:    slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&cfg)
	}
	l, err := ferry.NewLauncher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l, logs
}

// logsRun is a run of logsScript.
func logsRun(t *testing.T, runs, id string, env map[string]string) ferry.LaunchSpec {
	t.Helper()
	spec := newRun(t, runs, id, env)
	spec.Argv = []string{"sh", "-c", logsScript}
	return spec
}

// liveFiles reads the host's copies and then the sandbox's files, in that
// order: the sandbox's only grow (but where a test truncates them), so a
// correct host copy is a prefix of what is read after it.
type liveFiles struct {
	runDir, metaDir string
}

func (f liveFiles) read(t *testing.T, name string) (host, sandbox []byte) {
	t.Helper()
	host, err := os.ReadFile(filepath.Join(f.runDir, name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	sandbox, err = os.ReadFile(filepath.Join(f.metaDir, name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return host, sandbox
}

// checkPrefix fails unless every live copy is a prefix of the sandbox's
// file, and returns the sizes of those that hold a line of the command's.
func (f liveFiles) checkPrefix(t *testing.T, when string) (live map[string]int) {
	t.Helper()
	live = map[string]int{}
	for _, name := range ferry.Followed {
		host, sb := f.read(t, name)
		if !bytes.HasPrefix(sb, host) {
			t.Fatalf("%s: host %s (%d bytes) is not a prefix of the sandbox's (%d bytes):\nhost:\n%s\nsandbox:\n%s", when, name, len(host), len(sb), host, sb)
		}
		if bytes.Contains(host, []byte("runner 0 ")) || bytes.Contains(host, []byte(`"i":0`)) {
			live[name] = len(host)
		}
	}
	return live
}

// checkEqual fails unless the host's copies are the sandbox's files.
func (f liveFiles) checkEqual(t *testing.T) {
	t.Helper()
	for _, name := range ferry.Followed {
		host, sb := f.read(t, name)
		if !bytes.Equal(host, sb) {
			t.Fatalf("at the end, host %s (%d bytes) is not the sandbox's (%d bytes)", name, len(host), len(sb))
		}
	}
}

// lagMeter records, for each line written with its time, how long after
// it the test first saw it on the host.
type lagMeter struct {
	seen map[string]bool
	lags []time.Duration
}

func (m *lagMeter) observe(host []byte, now time.Time) {
	if m.seen == nil {
		m.seen = map[string]bool{}
	}
	for _, line := range strings.Split(string(host), "\n") {
		if m.seen[line] {
			continue
		}
		var ns string
		switch {
		case strings.HasPrefix(line, "runner "):
			f := strings.Fields(line)
			if len(f) != 3 {
				continue
			}
			ns = f[2]
		case strings.HasPrefix(line, `{"i":`):
			_, rest, ok := strings.Cut(line, `"t":`)
			if !ok {
				continue
			}
			ns, _, _ = strings.Cut(rest, ",")
		default:
			continue
		}
		n, err := strconv.ParseInt(ns, 10, 64)
		if err != nil {
			continue
		}
		m.seen[line] = true
		m.lags = append(m.lags, now.Sub(time.Unix(0, n)))
	}
}

func (m *lagMeter) String() string {
	if len(m.lags) == 0 {
		return "no lines"
	}
	s := slices.Clone(m.lags)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("%d lines: mean %v, median %v, p90 %v, max %v", len(s), r(sum/time.Duration(len(s))), r(s[len(s)/2]), r(s[len(s)*9/10]), r(s[len(s)-1]))
}

// TestLauncherLiveLogs: while the run runs, Inspect polled as rascald
// does (every second, and every 100 ms) grows the host's runner.log and
// agent.ndjson, each a prefix of the sandbox's at every poll; at the end
// they are the sandbox's. It reports the lag from a line's write in the
// sandbox to its sight on the host.
func TestLauncherLiveLogs(t *testing.T) {
	for _, every := range []time.Duration{100 * time.Millisecond, time.Second} {
		t.Run(every.String(), func(t *testing.T) {
			e := newLaunchEnv(t)
			l, _ := newLogsLauncher(t, e.c, e.c, e.runs, e.st, nil)
			h, err := l.StartDetached(ctx(t), logsRun(t, e.runs, "live", map[string]string{"LINES": "40", "EVERY": "0.1"}))
			if err != nil {
				t.Fatal(err)
			}
			f := liveFiles{runDir: filepath.Join(e.runs, "live"), metaDir: filepath.Join(e.g.Root, ferry.SandboxName(h), ferry.DefaultMetaDir)}
			var meter lagMeter
			// The sizes of the live copies the polls saw during the run.
			sawLive := map[string][]int{}
			var inspects []time.Duration
			for i := 0; ; i++ {
				if i > 600 {
					t.Fatal("run still running after 600 polls")
				}
				start := time.Now()
				s, err := l.Inspect(ctx(t), h)
				if err != nil {
					t.Fatalf("inspect: %v", err)
				}
				if !s.Running {
					break
				}
				inspects = append(inspects, time.Since(start))
				now := time.Now()
				for name, n := range f.checkPrefix(t, fmt.Sprintf("poll %d", i)) {
					sawLive[name] = append(sawLive[name], n)
				}
				for _, name := range ferry.Followed {
					host, _ := f.read(t, name)
					meter.observe(host, now)
				}
				time.Sleep(every)
			}
			f.checkEqual(t)
			for _, name := range ferry.Followed {
				final, _ := f.read(t, name)
				if !slices.ContainsFunc(sawLive[name], func(n int) bool { return n > 0 && n < len(final) }) {
					t.Errorf("no Inspect left a live, strict prefix of %s on the host during the run (sizes %v of %d)", name, sawLive[name], len(final))
				}
			}
			if _, err := os.Stat(filepath.Join(f.runDir, ".ferry-live.json")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("live state left after the end: %v", err)
			}
			slices.Sort(inspects)
			t.Logf("Inspect every %v: lag %v; running Inspect median %v, max %v", every, &meter,
				inspects[len(inspects)/2].Round(time.Millisecond), inspects[len(inspects)-1].Round(time.Millisecond))
			if err := l.Remove(ctx(t), h); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// cutExec cuts the relay of the first exec it starts after arm, once
// that exec's output has passed after bytes: its stdout fails and its
// context ends, as a dropped relay does.
type cutExec struct {
	relay.Execer
	after int64
	armed atomic.Bool
	cuts  atomic.Int32
}

func (c *cutExec) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	if !c.armed.CompareAndSwap(true, false) || cmd.Stdout == nil {
		return c.Execer.Exec(ctx, cmd)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cc := *cmd
	cc.Stdout = &cutWriter{w: cmd.Stdout, left: c.after, cut: func() {
		c.cuts.Add(1)
		cancel(relay.ErrRelayLost)
	}}
	return c.Execer.Exec(ctx, &cc)
}

type cutWriter struct {
	mu   sync.Mutex
	w    interface{ Write([]byte) (int, error) }
	left int64
	cut  func()
}

func (w *cutWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.left <= 0 {
		return 0, relay.ErrRelayLost
	}
	if int64(len(p)) > w.left {
		n, _ := w.w.Write(p[:w.left])
		w.left = 0
		w.cut()
		return n, relay.ErrRelayLost
	}
	w.left -= int64(len(p))
	return w.w.Write(p)
}

// TestLauncherLiveLogsRelayCut: the relay of an Inspect is cut in the
// middle of its follow step, after some of agent.ndjson's new bytes have
// arrived and been appended; the next Inspects resume where the host's
// copies end, nothing lost or doubled (each copy stays a prefix of the
// sandbox's file at every poll), and the end leaves the sandbox's files.
func TestLauncherLiveLogsRelayCut(t *testing.T) {
	e := newLaunchEnv(t)
	// The agent sends a followed file in pieces of 256 KiB: the cut falls
	// in the second piece of a step, after an agent connection's
	// handshake, probe and status (some 2.3 KiB) and the first piece.
	x := &cutExec{Execer: e.c, after: 270 << 10}
	l, logs := newLogsLauncher(t, x, e.c, e.runs, e.st, nil)
	// 16 KiB lines of noise, 20 a second.
	h, err := l.StartDetached(ctx(t), logsRun(t, e.runs, "cut", map[string]string{"LINES": "120", "EVERY": "0.05", "PAD": "8192", "WAIT_FOR": "go"}))
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(e.g.Root, ferry.SandboxName(h))
	f := liveFiles{runDir: filepath.Join(e.runs, "cut"), metaDir: filepath.Join(ws, ferry.DefaultMetaDir)}
	var prev int
	for i := 0; ; i++ {
		if i > 300 {
			t.Fatal("run still running after 300 polls")
		}
		if i == 5 {
			// More than two pieces pile up (waited for, not slept on: a
			// loaded machine writes slower), so the next Inspect's relay
			// is cut in its follow step.
			for j := 0; ; j++ {
				host, sb := f.read(t, "agent.ndjson")
				if len(sb)-len(host) >= 512<<10 {
					break
				}
				if j > 600 {
					t.Fatalf("agent.ndjson grew to only %d bytes beyond the host's %d in 30 s", len(sb)-len(host), len(host))
				}
				time.Sleep(50 * time.Millisecond)
			}
			x.armed.Store(true)
		}
		if i == 30 {
			write(t, ws, map[string]string{"go": ""})
		}
		s, err := l.Inspect(ctx(t), h)
		if err != nil {
			t.Fatalf("inspect %d: %v", i, err)
		}
		if !s.Running {
			break
		}
		f.checkPrefix(t, fmt.Sprintf("poll %d", i))
		host, sb := f.read(t, "agent.ndjson")
		if i == 5 && (len(host) <= prev || len(host) >= len(sb)) {
			t.Fatalf("the cut poll took agent.ndjson from %d to %d bytes of %d: the cut was not in its follow step", prev, len(host), len(sb))
		}
		prev = len(host)
		time.Sleep(100 * time.Millisecond)
	}
	if x.cuts.Load() != 1 {
		t.Fatalf("%d cuts, want 1", x.cuts.Load())
	}
	if !strings.Contains(logs.String(), "live log step ended early") {
		t.Fatalf("no follow step was cut:\n%s", logs)
	}
	f.checkEqual(t)
}

// TestLauncherLiveLogsBounded: a step appends at most its share of
// StepBytes, and a live copy grows no further than the pull's
// MaxFileSize, however much the sandbox writes.
func TestLauncherLiveLogsBounded(t *testing.T) {
	e := newLaunchEnv(t)
	const stepBytes, maxFile = 8 << 10, 64 << 10
	l, logs := newLogsLauncher(t, e.c, e.c, e.runs, e.st, func(c *ferry.LauncherConfig) {
		c.LiveLogs.StepBytes = stepBytes
		c.Limits.MaxFileSize = maxFile
	})
	// 3 KiB lines, 20 a second: far more than 4 KiB a poll.
	h, err := l.StartDetached(ctx(t), logsRun(t, e.runs, "bound", map[string]string{"LINES": "200", "EVERY": "0.05", "PAD": "1536", "WAIT_FOR": "go"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Remove(context.Background(), h) })
	f := liveFiles{runDir: filepath.Join(e.runs, "bound"), metaDir: filepath.Join(e.g.Root, ferry.SandboxName(h), ferry.DefaultMetaDir)}
	var prev int
	for i := 0; ; i++ {
		if s, err := l.Inspect(ctx(t), h); err != nil || !s.Running {
			t.Fatalf("inspect %d: %+v %v", i, s, err)
		}
		f.checkPrefix(t, fmt.Sprintf("poll %d", i))
		host, sb := f.read(t, "agent.ndjson")
		if grew := len(host) - prev; grew > stepBytes/2 {
			t.Fatalf("poll %d appended %d bytes to agent.ndjson, more than its share %d", i, grew, stepBytes/2)
		}
		prev = len(host)
		if len(host) > maxFile {
			t.Fatalf("live agent.ndjson has %d bytes, over MaxFileSize %d", len(host), maxFile)
		}
		if len(host) == maxFile && len(sb) > maxFile+stepBytes {
			break
		}
		if i > 300 {
			t.Fatalf("live agent.ndjson at %d bytes after 300 polls", len(host))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 3 {
		if _, err := l.Inspect(ctx(t), h); err != nil {
			t.Fatal(err)
		}
	}
	if host, _ := f.read(t, "agent.ndjson"); len(host) != maxFile {
		t.Fatalf("live agent.ndjson grew past the limit to %d bytes", len(host))
	}
	if n := strings.Count(logs.String(), "live log copy reached the pull's limit"); n != 1 {
		t.Fatalf("%d log lines say agent.ndjson reached the limit, want 1:\n%s", n, logs)
	}
}

// TestLauncherLiveLogsTakeover: the gateway goes away mid-run (the relay
// drops for good) while the command writes on; a new Launcher over the
// same runs directory, through a new gateway, continues the live copies
// from the host's sizes.
func TestLauncherLiveLogsTakeover(t *testing.T) {
	root := t.TempDir()
	st, _ := newStore(t, nil)
	runs := t.TempDir()
	addr, stop := serveGateway(t, root)
	c1 := dialGateway(t, addr)
	l1, _ := newLogsLauncher(t, c1, c1, runs, st, nil)
	h, err := l1.StartDetached(ctx(t), logsRun(t, runs, "take", map[string]string{"LINES": "30", "EVERY": "0.1", "WAIT_FOR": "go"}))
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(root, ferry.SandboxName(h))
	f := liveFiles{runDir: filepath.Join(runs, "take"), metaDir: filepath.Join(ws, ferry.DefaultMetaDir)}
	for i := 0; ; i++ {
		if _, err := l1.Inspect(ctx(t), h); err != nil {
			t.Fatal(err)
		}
		f.checkPrefix(t, "first launcher")
		if host, _ := f.read(t, "agent.ndjson"); bytes.Count(host, []byte("\n")) >= 3 {
			break
		}
		if i > 100 {
			t.Fatal("no live agent.ndjson from the first launcher")
		}
		time.Sleep(100 * time.Millisecond)
	}
	before, _ := f.read(t, "agent.ndjson")
	stop()
	c1.Close()
	time.Sleep(500 * time.Millisecond)

	addr, stop = serveGateway(t, root)
	defer stop()
	c2 := dialGateway(t, addr)
	l2, _ := newLogsLauncher(t, c2, c2, runs, st, nil)
	if s, err := l2.Inspect(ctx(t), h); err != nil || !s.Running {
		t.Fatalf("takeover inspect: %+v %v", s, err)
	}
	f.checkPrefix(t, "takeover")
	after, _ := f.read(t, "agent.ndjson")
	if len(after) <= len(before) || !bytes.HasPrefix(after, before) {
		t.Fatalf("the new launcher did not continue agent.ndjson: %d bytes before, %d after", len(before), len(after))
	}
	write(t, ws, map[string]string{"go": ""})
	for i := 0; ; i++ {
		s, err := l2.Inspect(ctx(t), h)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Running {
			break
		}
		f.checkPrefix(t, fmt.Sprintf("poll %d", i))
		if i > 300 {
			t.Fatal("run still running after 300 polls")
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.checkEqual(t)
}

// TestLauncherLiveLogsTruncated: a sandbox truncates its agent.ndjson
// mid-run (Rascal's worker does, when it runs the agent again), leaving
// it shorter than the host's copy or rewriting it longer at once. The
// host's copy is never spliced: it starts over, a prefix of the new file,
// and a log line says so; a file started over more than MaxLiveRestarts
// times is no longer copied. runner.log is still followed, and the final
// pull leaves the sandbox's files.
func TestLauncherLiveLogsTruncated(t *testing.T) {
	cases := []struct {
		name   string
		truncs int
		regrow bool
		// stopped: the last truncation stops the copy.
		stopped bool
	}{
		{name: "shorter", truncs: 1},
		{name: "rewritten longer", truncs: 1, regrow: true},
		{name: "rewritten too often", truncs: ferry.MaxLiveRestarts + 1, regrow: true, stopped: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newLaunchEnv(t)
			l, logs := newLogsLauncher(t, e.c, e.c, e.runs, e.st, nil)
			env := map[string]string{"LINES": "20", "EVERY": "0.05", "TRUNC_AT": "4", "TRUNCS": strconv.Itoa(tc.truncs), "WAIT_FOR": "go"}
			if tc.regrow {
				env["REGROW"] = "1"
			}
			h, err := l.StartDetached(ctx(t), logsRun(t, e.runs, "trunc", env))
			if err != nil {
				t.Fatal(err)
			}
			ws := filepath.Join(e.g.Root, ferry.SandboxName(h))
			f := liveFiles{runDir: filepath.Join(e.runs, "trunc"), metaDir: filepath.Join(ws, ferry.DefaultMetaDir)}
			poll := func() {
				t.Helper()
				if s, err := l.Inspect(ctx(t), h); err != nil || !s.Running {
					t.Fatalf("inspect: %+v %v", s, err)
				}
			}
			// Wait until the host holds the five lines before the cut.
			for i := 0; ; i++ {
				poll()
				f.checkPrefix(t, "before the truncation")
				if host, _ := f.read(t, "agent.ndjson"); bytes.Count(host, []byte("\n")) == 5 {
					break
				} else if i > 100 {
					t.Fatalf("host agent.ndjson never held the first 5 lines: %q", host)
				}
				time.Sleep(50 * time.Millisecond)
			}
			var kept []byte
			for n := 1; n <= tc.truncs; n++ {
				kept, _ = f.read(t, "agent.ndjson")
				write(t, ws, map[string]string{fmt.Sprintf("trunc-%d", n): ""})
				waitFile(t, filepath.Join(ws, fmt.Sprintf("truncated-%d", n)))
				poll()
				host, sb := f.read(t, "agent.ndjson")
				if tc.stopped && n == tc.truncs {
					if !bytes.Equal(host, kept) {
						t.Fatalf("generation %d: a stopped copy changed:\nkept:\n%s\nnow:\n%s", n, kept, host)
					}
					continue
				}
				// The new file, none of the old: all of it while the
				// sandbox's is empty, its 40 new lines when regrown.
				fresh := len(host) == 0
				if tc.regrow {
					fresh = bytes.HasPrefix(host, []byte(fmt.Sprintf("NEW content of generation %d, line 0\n", n))) &&
						bytes.Count(host, []byte("NEW content")) == 40
				}
				if !bytes.HasPrefix(sb, host) || bytes.Contains(host, []byte(`"i":0,`)) || !fresh {
					t.Fatalf("generation %d: host agent.ndjson is not the new file:\nhost:\n%s\nsandbox:\n%s", n, host, sb)
				}
			}
			restarts := min(tc.truncs, ferry.MaxLiveRestarts)
			if n := strings.Count(logs.String(), "live log copy restarted"); n != restarts {
				t.Fatalf("%d log lines say the copy restarted, want %d:\n%s", n, restarts, logs)
			}
			if n := strings.Count(logs.String(), "live log copy stopped"); n != map[bool]int{false: 0, true: 1}[tc.stopped] {
				t.Fatalf("%d log lines say the copy stopped (want it: %v):\n%s", n, tc.stopped, logs)
			}
			if !tc.regrow {
				write(t, ws, map[string]string{"resume": ""})
			}
			// The copies go on: a prefix of the sandbox's files (agent.ndjson
			// unless stopped), runner.log growing.
			runnerBefore, _ := f.read(t, "runner.log")
			for i := 0; ; i++ {
				poll()
				if !tc.stopped {
					f.checkPrefix(t, fmt.Sprintf("after the truncation, poll %d", i))
				}
				host, sb := f.read(t, "runner.log")
				if !bytes.HasPrefix(sb, host) {
					t.Fatalf("host runner.log is not a prefix of the sandbox's")
				}
				if len(host) > len(runnerBefore) {
					break
				}
				if i > 100 {
					t.Fatal("runner.log no longer followed after agent.ndjson's truncation")
				}
				time.Sleep(100 * time.Millisecond)
			}
			write(t, ws, map[string]string{"go": ""})
			if s := inspectUntilDone(t, l, h); s.ExitCode != 0 {
				t.Fatalf("exit code %d", s.ExitCode)
			}
			f.checkEqual(t)
		})
	}
}

// TestLauncherLiveLogsRemovedAtEnd: a sandbox removes its agent.ndjson
// before the command ends; the finish removes the host's live copy of it,
// so that the run directory holds what the sandbox held.
func TestLauncherLiveLogsRemovedAtEnd(t *testing.T) {
	e := newLaunchEnv(t)
	l, _ := newLogsLauncher(t, e.c, e.c, e.runs, e.st, nil)
	h, err := l.StartDetached(ctx(t), logsRun(t, e.runs, "rm", map[string]string{"LINES": "3", "EVERY": "0.05", "WAIT_FOR": "go", "RM_AT_END": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(e.g.Root, ferry.SandboxName(h))
	f := liveFiles{runDir: filepath.Join(e.runs, "rm"), metaDir: filepath.Join(ws, ferry.DefaultMetaDir)}
	for i := 0; ; i++ {
		if s, err := l.Inspect(ctx(t), h); err != nil || !s.Running {
			t.Fatalf("inspect: %+v %v", s, err)
		}
		if host, _ := f.read(t, "agent.ndjson"); bytes.Count(host, []byte("\n")) == 3 {
			break
		} else if i > 100 {
			t.Fatalf("host agent.ndjson never held the 3 lines: %q", host)
		}
		time.Sleep(50 * time.Millisecond)
	}
	write(t, ws, map[string]string{"go": ""})
	if s := inspectUntilDone(t, l, h); s.ExitCode != 0 {
		t.Fatalf("exit code %d", s.ExitCode)
	}
	if _, err := os.Stat(filepath.Join(f.runDir, "agent.ndjson")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the live agent.ndjson is still in the run directory: %v", err)
	}
	f.checkEqual(t)
	if _, err := os.Stat(filepath.Join(f.runDir, ".ferry-live.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("live state left after the end: %v", err)
	}
}
