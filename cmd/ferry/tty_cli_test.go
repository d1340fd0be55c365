package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/openshell"
)

// tmuxServer is a tmux server of the test's own, on its own socket, killed
// when the test ends: the terminal a person would run ferry in.
type tmuxServer struct {
	t    *testing.T
	sock string
}

func startTmux(t *testing.T, cols, rows int, command string) *tmuxServer {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("no tmux (make deps installs it)")
	}
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	s := &tmuxServer{t: t, sock: "ferry-test-" + hex.EncodeToString(b)}
	// No status line, so that the pane is the whole window; the pane
	// stays once its command is done, to be read.
	s.run("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows), command,
		";", "set-option", "-g", "status", "off",
		";", "set-option", "-g", "remain-on-exit", "on")
	t.Cleanup(func() {
		// Only the server on this test's socket.
		_ = exec.Command("tmux", "-L", s.sock, "kill-server").Run()
	})
	return s
}

func (s *tmuxServer) run(args ...string) string {
	s.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", s.sock}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %q: %v: %s", args, err, out)
	}
	return string(out)
}

// pane is what the pane shows, and what scrolled off it.
func (s *tmuxServer) pane() string {
	s.t.Helper()
	return s.run("capture-pane", "-p", "-J", "-S", "-200", "-t", "t")
}

// keys types text, then Enter.
func (s *tmuxServer) keys(text string) {
	s.t.Helper()
	s.run("send-keys", "-t", "t", "-l", text)
	s.run("send-keys", "-t", "t", "Enter")
}

// waitLine waits until a line of the pane matches re.
func (s *tmuxServer) waitLine(re string) {
	s.t.Helper()
	rx := regexp.MustCompile(`(?m)^` + re + `\s*$`)
	deadline := time.Now().Add(30 * time.Second)
	for !rx.MatchString(s.pane()) {
		if time.Now().After(deadline) {
			s.t.Fatalf("no line %q in the pane:\n%s", re, s.pane())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFile waits for path to hold a line, and returns it.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSuffix(string(b), "\n")
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not written: %v", path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExecTTYInTmux runs `ferry exec -t box -- sh` in a tmux pane, as a
// person would, against a gateway the test runs: keys typed in the pane
// reach the sandbox's shell once each (raw mode: no local echo), Ctrl-C
// interrupts the remote command rather than ferry, the sandbox's terminal
// has the pane's size and follows a resize, ferry exits with the shell's
// code, and the pane's terminal modes are as they were before; over the
// exec RPCs and over the gateway's SSH relay alike.
func TestExecTTYInTmux(t *testing.T) {
	g := activeGateway(t)
	g.Sandbox(t, g.Client(t, openshell.Config{}), "box")
	for _, transport := range []string{"exec", "ssh"} {
		t.Run(transport, func(t *testing.T) { tmuxSession(t, transport) })
	}
}

func tmuxSession(t *testing.T, transport string) {
	dir := t.TempDir()
	argv, err := json.Marshal([]string{"exec", "-t", "--transport", transport, "box", "--", "sh"})
	if err != nil {
		t.Fatal(err)
	}
	// The pane's shell runs this binary as ferry (see crashChildEnv) in
	// the test's environment (the isolated config that names the
	// gateway), between two snapshots of the pane's terminal modes.
	var script strings.Builder
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "TERM" || strings.HasPrefix(k, "TMUX") || !envKeyOK(k) {
			continue
		}
		script.WriteString("export " + relay.Quote(kv) + "\n")
	}
	script.WriteString("export " + relay.Quote(crashChildEnv+"="+string(argv)) + "\n")
	q := func(name string) string { return relay.Quote(filepath.Join(dir, name)) }
	script.WriteString("stty -g >" + q("before") + "\n")
	script.WriteString(relay.Quote(os.Args[0]) + "\n")
	script.WriteString("echo $? >" + q("code") + "\n")
	script.WriteString("stty -g >" + q("after") + "\n")
	scriptPath := filepath.Join(dir, "pane.sh")
	writeFile(t, scriptPath, []byte(script.String()), 0o700)

	tm := startTmux(t, 100, 30, "sh "+relay.Quote(scriptPath))
	before := waitFile(t, filepath.Join(dir, "before"))
	tm.waitLine(`[$#] `) // sh's prompt, as root or not

	tm.keys("echo $((6*7))")
	tm.waitLine("42")
	if n := strings.Count(tm.pane(), "echo $((6*7))"); n != 1 {
		t.Fatalf("the typed line shows %d times, want once (the remote echo only):\n%s", n, tm.pane())
	}
	tm.keys("tty")
	tm.waitLine(`/dev/pts/[0-9]+`)
	tm.keys(`echo "size:$(stty size)"`)
	tm.waitLine("size:30 100")

	// ^C goes through to the sandbox: it ends sleep, not ferry.
	tm.keys("sleep 600")
	time.Sleep(200 * time.Millisecond)
	tm.run("send-keys", "-t", "t", "C-c")
	// Typed before the shell's new prompt, the next line would be echoed
	// ahead of it and its output land on the prompt's line.
	tm.waitLine(`[$#] ?`)
	tm.keys("echo after-interrupt")
	tm.waitLine("after-interrupt")

	tm.run("resize-window", "-t", "t", "-x", "120", "-y", "40")
	tm.keys(`while [ "$(stty size)" != "40 120" ]; do sleep 0.05; done; echo "resized:$(stty size)"`)
	tm.waitLine("resized:40 120")

	tm.keys("exit 3")
	if code := waitFile(t, filepath.Join(dir, "code")); code != "3" {
		t.Fatalf("ferry exited %s, want the shell's 3; pane:\n%s", code, tm.pane())
	}
	if after := waitFile(t, filepath.Join(dir, "after")); after != before {
		t.Fatalf("terminal modes after ferry %q, before %q", after, before)
	}
}

var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// envKeyOK: only variables a shell can export by name.
func envKeyOK(k string) bool { return envKeyRE.MatchString(k) }

// TestExecTTYNotATerminal: with stdin and stdout no terminal, -t still
// runs the command on a remote terminal (as `docker exec -t` does), with
// stderr merged into stdout and stdin typed at it, and exits with its
// code, over the exec RPCs and over the gateway's SSH relay alike.
func TestExecTTYNotATerminal(t *testing.T) {
	g := activeGateway(t)
	g.Sandbox(t, g.Client(t, openshell.Config{}), "box")
	for _, transport := range []string{"exec", "ssh"} {
		t.Run(transport, func(t *testing.T) {
			r := runFerry(t, strings.NewReader("typed\n"), "exec", "--tty", "--transport", transport, "box", "--", "sh", "-c", `tty; echo e >&2; read x; echo "got:$x"; exit 5`)
			if r.code != 5 || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q; want 5 and nothing on stderr", r.code, r.stderr, r.stdout)
			}
			if !regexp.MustCompile(`(?m)^/dev/pts/[0-9]+\r$`).MatchString(r.stdout) || !strings.Contains(r.stdout, "e\r\n") || !strings.Contains(r.stdout, "got:typed\r\n") {
				t.Fatalf("stdout %q", r.stdout)
			}
		})
	}
}
