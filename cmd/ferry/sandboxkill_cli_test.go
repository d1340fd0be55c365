package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
)

// TestSandboxDeleteEndsDetached: `ferry sandbox delete` ends what the
// sandbox detached from its exec (a setsid child, a double-forked daemon),
// over either transport, before it returns.
func TestSandboxDeleteEndsDetached(t *testing.T) {
	for _, transport := range []string{"exec", "ssh"} {
		t.Run(transport, func(t *testing.T) {
			g := activeGateway(t)
			wantOK(t, runFerry(t, nil, "--quiet", "sandbox", "create", "box"))
			wantOK(t, runFerry(t, nil, "--transport", transport, "exec", "box", "--", "sh", "-c",
				`setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > setsid.pid
sh -c 'setsid sh -c "echo \$\$ > daemon.pid; exec sleep 300" </dev/null >/dev/null 2>&1 &'`))
			type proc struct{ pid, start string }
			var procs []proc
			for _, name := range []string{"setsid.pid", "daemon.pid"} {
				var pid string
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					b, _ := os.ReadFile(filepath.Join(g.Root, "box", name))
					if pid = strings.TrimSpace(string(b)); pid != "" {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s not written", name)
					}
				}
				p := proc{pid, startTime(pid)}
				if p.start == "" {
					t.Fatalf("%s: pid %s not running", name, pid)
				}
				t.Cleanup(func() {
					if startTime(p.pid) == p.start {
						n, _ := strconv.Atoi(p.pid)
						_ = syscall.Kill(n, syscall.SIGKILL)
					}
				})
				procs = append(procs, p)
			}
			wantOK(t, runFerry(t, nil, "--quiet", "sandbox", "delete", "box"))
			for _, p := range procs {
				if startTime(p.pid) == p.start {
					t.Errorf("pid %s outlived ferry sandbox delete", p.pid)
				}
			}
		})
	}
}

// startTime is field 22 of /proc/PID/stat, the process's start time; ""
// once the pid is gone or a zombie (dead, waiting for a parent that may
// never reap it).
func startTime(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return f[19]
}

// TestSandboxDeleteEndsAgentRun: a run detached through ferry's agent
// (Spawn: a supervisor that double-forks away from the exec and outlives
// it) ends, supervisor and command, with `ferry sandbox delete`.
func TestSandboxDeleteEndsAgentRun(t *testing.T) {
	g := activeGateway(t)
	wantOK(t, runFerry(t, nil, "--quiet", "sandbox", "create", "agent"))
	c := g.Client(t, openshell.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, _, err := agent.Dial(ctx, agent.DialConfig{X: c, Sandbox: "agent", Bundle: agenttest.Bundle(t)})
	if err != nil {
		t.Fatal(err)
	}
	st, spawned, err := a.Spawn(ctx, agent.SpawnSpec{
		StateDir: "state", RunID: "r", Log: "out.log",
		Argv: []string{"sh", "-c", `echo $$ > cmd.pid; exec sleep 300`},
	})
	if err != nil || !spawned || st.State != agent.RunRunning {
		t.Fatalf("spawn: %+v %v %v", st, spawned, err)
	}
	var cmd string
	for deadline := time.Now().Add(10 * time.Second); cmd == ""; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(g.Root, "agent", "cmd.pid"))
		cmd = strings.TrimSpace(string(b))
		if time.Now().After(deadline) {
			t.Fatal("cmd.pid not written")
		}
	}
	// The supervisor is the command's parent.
	status, err := os.ReadFile("/proc/" + cmd + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var sup string
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			sup = strings.TrimSpace(v)
		}
	}
	if sup == "" || sup == "1" || sup == strconv.Itoa(os.Getpid()) {
		t.Fatalf("the command's parent is pid %q, not a supervisor", sup)
	}
	starts := map[string]string{cmd: startTime(cmd), sup: startTime(sup)}
	for pid, start := range starts {
		t.Cleanup(func() {
			if startTime(pid) == start {
				n, _ := strconv.Atoi(pid)
				_ = syscall.Kill(n, syscall.SIGKILL)
			}
		})
	}
	a.Close()
	for pid, start := range starts {
		if start == "" || startTime(pid) != start {
			t.Fatalf("pid %s ended with its exec, before the delete", pid)
		}
	}
	wantOK(t, runFerry(t, nil, "--quiet", "sandbox", "delete", "agent"))
	for pid, start := range starts {
		if startTime(pid) == start {
			t.Errorf("pid %s (supervisor %s, command %s) outlived ferry sandbox delete", pid, sup, cmd)
		}
	}
}
