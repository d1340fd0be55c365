package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/google/renameio/v2"
)

// The files of a state directory. The supervisor holds lockFile locked for
// as long as it lives (the kernel drops the lock when it dies, however it
// dies), so that "supervisor alive" never depends on a pid that may have
// been reused.
const (
	specFile     = "spec.json"
	pidFile      = "pid.json"
	exitFile     = "exit.json"
	lockFile     = "lock"
	stopFile     = "stop"
	outputFile   = "output"
	superviseLog = "supervisor.log"
)

// defaultKillGrace is what a timed-out command gets between SIGTERM and
// SIGKILL when the spawn did not say.
const defaultKillGrace = 10 * time.Second

// spawnSpec is spec.json: what the supervisor runs.
type spawnSpec struct {
	RunID       string            `json:"run_id"`
	Argv        []string          `json:"argv"`
	Env         map[string]string `json:"env,omitempty"`
	Workdir     string            `json:"workdir"` // absolute
	Log         string            `json:"log"`     // absolute
	TimeoutMS   int64             `json:"timeout_ms,omitempty"`
	KillGraceMS int64             `json:"kill_grace_ms,omitempty"`
	CreatedMS   int64             `json:"created_unix_ms"`
}

// pidRecord is pid.json: the command runs, as the leader of process group
// Pid.
type pidRecord struct {
	Pid int `json:"pid"`
	// Sid is the session the command runs in (the supervisor's): a
	// process that holds Pid but not in this session is another one.
	Sid       int   `json:"sid"`
	StartedMS int64 `json:"started_unix_ms"`
}

// exitRecord is exit.json, written once, atomically, when the command has
// ended.
type exitRecord struct {
	ExitCode int    `json:"exit_code"`
	TimedOut bool   `json:"timed_out,omitempty"`
	EndedMS  int64  `json:"ended_unix_ms"`
	Error    string `json:"error,omitempty"`
}

// Main is the `supervise` subcommand of the agent binary, args
// being what follows it: `supervise DIR` detaches (a new session, so that
// the end of the exec that started the agent, and the process group kill
// that comes with it, do not reach it) and re-executes the binary as
// `supervise -run DIR`, which is the supervisor proper; the first process
// exits at once, so the agent that started it reaps it and leaves no
// zombie, and the supervisor is adopted by the sandbox's init. File
// descriptor 3, when open, is the readiness pipe: the supervisor writes
// "ok" to it once the command runs (or has been recorded as not started),
// and anything else is why it failed. It returns the process's exit code.
func Main(args []string) int {
	ready := os.NewFile(3, "ready")
	// Not to be inherited by the command: only this process reports.
	syscall.CloseOnExec(3)
	switch {
	case len(args) == 1:
		return detach(args[0], ready)
	case len(args) == 2 && args[0] == "-run":
		return supervise(args[1], ready)
	}
	fmt.Fprintln(os.Stderr, "usage: supervise [-run] STATEDIR")
	return 2
}

// detach starts the supervisor in a new session and returns.
func detach(dir string, ready *os.File) int {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "supervise: no subcommand in argv")
		return 2
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		fmt.Fprintf(os.Stderr, "supervise: %v\n", err)
		return 1
	}
	defer null.Close()
	files := []*os.File{null, os.Stdout, os.Stderr}
	if ready != nil {
		files = append(files, ready)
	}
	// /proc/self/exe, not os.Args[0]: the cached binary may be replaced
	// by a reinstall while a run is going, and this is the one running.
	p, err := os.StartProcess("/proc/self/exe", []string{os.Args[0], os.Args[1], "-run", dir}, &os.ProcAttr{
		Files: files,
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "supervise: start supervisor: %v\n", err)
		if ready != nil {
			fmt.Fprintf(ready, "start supervisor: %v\n", err)
		}
		return 1
	}
	p.Release()
	return 0
}

// supervise runs the command of the state directory dir, records it, and
// records how it ended.
func supervise(dir string, ready *os.File) int {
	say := func(format string, a ...any) {
		msg := fmt.Sprintf(format, a...)
		fmt.Fprintf(os.Stderr, "%s supervise: %s\n", time.Now().UTC().Format(time.RFC3339), msg)
		if ready != nil {
			fmt.Fprintln(ready, msg)
			ready.Close()
			ready = nil
		}
	}
	// The exec's end, or a terminal going away, must not end the
	// supervisor; SIGTERM to it is passed to the command.
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	lock, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		say("open lock: %v", err)
		return 1
	}
	defer lock.Close()
	// Blocking: a Status probe holds the lock only for a moment.
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		say("lock: %v", err)
		return 1
	}
	if exists(filepath.Join(dir, pidFile)) || exists(filepath.Join(dir, exitFile)) {
		// Another supervisor ran this command: never run it twice.
		say("ok")
		return 0
	}
	var spec spawnSpec
	if err := readJSON(filepath.Join(dir, specFile), &spec); err != nil {
		say("read spec: %v", err)
		return 1
	}
	if sig, ok := stopSignal(dir); ok {
		err := writeJSON(dir, exitFile, exitRecord{ExitCode: 128 + int(sig), EndedMS: nowMS(), Error: "stopped before it started"})
		if err != nil {
			say("record exit: %v", err)
			return 1
		}
		say("ok")
		return 0
	}
	fail := func(code int, err error) int {
		if werr := writeJSON(dir, exitFile, exitRecord{ExitCode: code, EndedMS: nowMS(), Error: err.Error()}); werr != nil {
			say("record exit: %v", werr)
			return 1
		}
		say("ok")
		return 0
	}
	if err := os.MkdirAll(filepath.Dir(spec.Log), 0o755); err != nil {
		return fail(wire.ExitCannotRun, fmt.Errorf("create log dir: %w", err))
	}
	out, err := os.OpenFile(spec.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fail(wire.ExitCannotRun, fmt.Errorf("open log: %w", err))
	}
	defer out.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return fail(wire.ExitCannotRun, err)
	}
	defer null.Close()
	env := commandEnv(os.Environ(), spec.Env)
	prog, err := lookPath(spec.Argv[0], spec.Workdir, env)
	if err != nil {
		fmt.Fprintf(out, "ferry-agent: %s: %v\n", spec.Argv[0], err)
		return fail(wire.ExitCannotRun, fmt.Errorf("%s: %w", spec.Argv[0], err))
	}
	p, err := os.StartProcess(prog, spec.Argv, &os.ProcAttr{
		Dir:   spec.Workdir,
		Env:   env,
		Files: []*os.File{null, out, out},
		// Its own process group: one signal reaches everything it
		// started.
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		fmt.Fprintf(out, "ferry-agent: %s: %v\n", spec.Argv[0], err)
		return fail(wire.ExitCannotRun, fmt.Errorf("start %s: %w", spec.Argv[0], err))
	}
	pid := p.Pid
	sid, _ := unix.Getsid(0)
	if err := writeJSON(dir, pidFile, pidRecord{Pid: pid, Sid: sid, StartedMS: nowMS()}); err != nil {
		// Unrecorded, the command could not be stopped: end it.
		syscall.Kill(-pid, syscall.SIGKILL)
		p.Wait()
		say("record pid: %v", err)
		return 1
	}
	say("ok")
	// A Signal that came before pid.json existed left its marker.
	if sig, ok := stopSignal(dir); ok {
		syscall.Kill(-pid, sig)
	}

	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	var timeout <-chan time.Time
	if spec.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(spec.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	grace := time.Duration(spec.KillGraceMS) * time.Millisecond
	if grace <= 0 {
		grace = defaultKillGrace
	}
	// The command is reaped only after its group has been signalled for
	// the last time: until then its zombie keeps the pid, and with it the
	// process group id, from being reused by an unrelated process that a
	// kill(-pid) would hit.
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		var info unix.Siginfo
		for unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
		}
	}()
	timedOut := false
	var kill <-chan time.Time
wait:
	for {
		select {
		case <-exited:
			break wait
		case s := <-term:
			syscall.Kill(-pid, s.(syscall.Signal))
		case <-timeout:
			timedOut, timeout = true, nil
			fmt.Fprintf(out, "ferry-agent: timed out after %s; stopping the command\n", time.Duration(spec.TimeoutMS)*time.Millisecond)
			syscall.Kill(-pid, syscall.SIGTERM)
			kill = time.After(grace)
		case <-kill:
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	// What the command left running in its group ends with it, as a
	// container's processes end with its main process.
	syscall.Kill(-pid, syscall.SIGKILL)
	ps, _ := p.Wait()
	rec := exitRecord{ExitCode: exitCodeOf(ps), TimedOut: timedOut, EndedMS: nowMS()}
	if timedOut {
		rec.ExitCode = wire.ExitTimeout
	}
	out.Sync()
	if err := writeJSON(dir, exitFile, rec); err != nil {
		fmt.Fprintf(os.Stderr, "supervise: record exit: %v\n", err)
		return 1
	}
	return 0
}

// exitCodeOf is a shell's exit code for ps: 128+signal for a signal.
func exitCodeOf(ps *os.ProcessState) int {
	if ps == nil {
		return 1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// commandEnv is base with add set over it, in a stable order.
func commandEnv(base []string, add map[string]string) []string {
	var env []string
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := add[k]; !ok {
			env = append(env, kv)
		}
	}
	keys := make([]string, 0, len(add))
	for k := range add {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+add[k])
	}
	return env
}

// lookPath finds prog as a shell would: a name with a slash is a path
// (relative to dir), anything else is searched in env's PATH. os/exec
// would do, but costs the agent's size more than these lines.
func lookPath(prog, dir string, env []string) (string, error) {
	if strings.Contains(prog, "/") {
		if !filepath.IsAbs(prog) {
			prog = filepath.Join(dir, prog)
		}
		return prog, executable(prog)
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		if p := filepath.Join(d, prog); executable(p) == nil {
			return p, nil
		}
	}
	return "", errors.New("command not found")
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fs.ErrPermission
	}
	return nil
}

// stopSignal reports the signal a Signal call left in dir's stop marker.
func stopSignal(dir string) (syscall.Signal, bool) {
	b, err := os.ReadFile(filepath.Join(dir, stopFile))
	if err != nil {
		return 0, false
	}
	if strings.TrimSpace(string(b)) == "KILL" {
		return syscall.SIGKILL, true
	}
	return syscall.SIGTERM, true
}

// writeJSON writes v to dir/name atomically: a temporary file, synced,
// renamed into place, and the directory synced, so that a reader sees the
// whole record or none, also after a crash.
func writeJSON(dir, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeAtomic(dir, name, b)
}

func writeAtomic(dir, name string, b []byte) error {
	err := renameio.WriteFile(filepath.Join(dir, name), b, 0o600, renameio.WithStaticPermissions(0o600), renameio.WithTempDir(dir))
	if err != nil {
		return err
	}
	// The rename is durable once the directory is: a record a restarted
	// supervisor cannot find is a run it cannot account for.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func readJSON(name string, v any) error {
	b, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func nowMS() int64 { return time.Now().UnixMilli() }
