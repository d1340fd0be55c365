package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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
