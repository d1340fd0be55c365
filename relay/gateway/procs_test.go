package gateway_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
)

// proc is a process a test started, known by its pid and its start time,
// so that a pid reused by another process is never taken for it.
type proc struct {
	name  string
	pid   int
	start string
}

// procStat returns process pid's state and start time (fields 3 and 22
// of /proc/PID/stat); ok is false once /proc has no such pid.
func procStat(pid int) (state byte, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	// comm, in parentheses, may hold spaces: the fields follow its last ')'.
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 20 {
		return 0, "", false
	}
	return f[0][0], f[19], true
}

// alive reports whether p still runs. A zombie has ended: it waits only
// for its parent to reap it (here, for the orphans, a pid 1 that may
// never do so).
func (p proc) alive() bool {
	state, start, ok := procStat(p.pid)
	return ok && start == p.start && state != 'Z'
}

// cgroup is p's cgroup v2 path.
func (p proc) cgroup() string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cgroup")
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest
		}
	}
	return ""
}

// readProcs waits for each pid file under dir to be written and returns
// its processes, each alive; they are killed when t ends if still there.
func readProcs(t *testing.T, dir string, names ...string) []proc {
	t.Helper()
	var out []proc
	for _, name := range names {
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, _ := os.ReadFile(filepath.Join(dir, name))
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_, start, ok := procStat(pid)
				if !ok {
					t.Fatalf("%s: pid %d is not running", name, pid)
				}
				p := proc{name: name, pid: pid, start: start}
				t.Cleanup(func() {
					if p.alive() {
						_ = syscall.Kill(p.pid, syscall.SIGKILL)
					}
				})
				out = append(out, p)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s was not written within 10s", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return out
}

func shExec(t *testing.T, c *openshell.Client, sandbox, script string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	var stderr strings.Builder
	code, err := c.Exec(ctx, &relay.Command{Sandbox: sandbox, Argv: []string{"sh", "-c", script}, Stderr: &stderr})
	if err != nil || code != 0 {
		t.Fatalf("exec in %s: exit %d, %v, stderr %q", sandbox, code, err, stderr.String())
	}
}

// The processes a sandbox detaches from its exec: one in a session of
// its own, a daemon that double-forks into a new session, and (with
// cgroups) one that also scrubs its environment, which only the cgroup
// can still tell belongs to the sandbox.
const (
	detachScript = `setsid sh -c 'sleep 300' </dev/null >/dev/null 2>&1 & echo $! > setsid.pid
sh -c 'setsid sh -c "echo \$\$ > daemon.pid; exec sleep 300" </dev/null >/dev/null 2>&1 &'`
	scrubScript = `setsid env -i sleep 300 </dev/null >/dev/null 2>&1 & echo $! > scrubbed.pid`
	otherScript = `setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > other.pid`
)

// TestEndDetachedProcesses: deleting or stopping a sandbox ends every
// process it started, the detached ones included, before the call
// returns, through its cgroup or, where the gateway has none, the
// FERRY_SANDBOX_ID sweep; another sandbox's process runs on.
func TestEndDetachedProcesses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		envOnly bool
		stop    bool
	}{
		{"CgroupDelete", false, false},
		{"CgroupStop", false, true},
		{"EnvDelete", true, false},
		{"EnvStop", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{EnvOnlyProcs: tc.envOnly}})
			c := g.Client(t, openshell.Config{})
			g.Sandbox(t, c, "box")
			g.Sandbox(t, c, "other")
			id, err := c.SandboxID(ctxFor(t), "box")
			if err != nil {
				t.Fatal(err)
			}
			box, other := filepath.Join(g.Root, "box"), filepath.Join(g.Root, "other")

			shExec(t, c, "box", detachScript)
			names := []string{"setsid.pid", "daemon.pid"}
			if !tc.envOnly {
				shExec(t, c, "box", scrubScript)
				names = append(names, "scrubbed.pid")
			}
			procs := readProcs(t, box, names...)
			shExec(t, c, "other", otherScript)
			survivor := readProcs(t, other, "other.pid")[0]

			// The path under test must be the one taken.
			for _, p := range procs {
				inCgroup := strings.HasSuffix(p.cgroup(), "/ferry-sandboxes/"+id)
				switch {
				case tc.envOnly && inCgroup:
					t.Fatalf("%s is in the sandbox's cgroup with EnvOnlyProcs", p.name)
				case !tc.envOnly && !inCgroup:
					if strings.Contains(g.Seen.String(), "tracked by environment only") {
						t.Skipf("no writable cgroup v2 here: %s", g.Seen.String())
					}
					t.Fatalf("%s is in cgroup %q, not the sandbox's", p.name, p.cgroup())
				}
			}

			began := time.Now()
			if tc.stop {
				if _, err := c.Stop(ctxFor(t), "box"); err != nil {
					t.Fatal(err)
				}
			} else if err := c.Delete(ctxFor(t), "box"); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s took %v", tc.name, time.Since(began))
			for _, p := range procs {
				if p.alive() {
					t.Errorf("%s (pid %d) outlived the sandbox's end", p.name, p.pid)
				}
			}
			if !survivor.alive() {
				t.Errorf("the other sandbox's process (pid %d) was killed", survivor.pid)
			}
			if err := c.Delete(ctxFor(t), "other"); err != nil {
				t.Fatal(err)
			}
			if survivor.alive() {
				t.Errorf("the other sandbox's process (pid %d) outlived its own sandbox's delete", survivor.pid)
			}
			if tc.stop {
				// A started sandbox runs again, in a fresh cgroup.
				if _, err := c.Start(ctxFor(t), "box"); err != nil {
					t.Fatal(err)
				}
				shExec(t, c, "box", "rm setsid.pid; "+detachScript)
				again := readProcs(t, box, "setsid.pid")[0]
				if err := c.Delete(ctxFor(t), "box"); err != nil {
					t.Fatal(err)
				}
				if again.alive() {
					t.Errorf("a process of the restarted sandbox (pid %d) outlived its delete", again.pid)
				}
			}
		})
	}
}
