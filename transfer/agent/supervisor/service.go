package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// Supervised commands: Spawn starts a command that outlives the exec
// stream, under a supervisor process (the agent binary itself, re-executed
// as `supervise`, see Main); Status and Signal, from any later
// connection, read and act on the state directory the supervisor keeps.
// Limitations: a state directory is trusted as the sandbox's own (anything
// in the sandbox can forge it); and a supervisor killed with SIGKILL (or a
// sandbox restart) leaves the command's fate unknown, reported as
// RunLost, the command possibly still running.

// startTimeout bounds how long Spawn waits for the supervisor to report
// that the command runs.
const startTimeout = 30 * time.Second

// startGrace is how long a state directory without a running supervisor
// or a pid is taken to be starting rather than lost.
const startGrace = 30 * time.Second

// Paths resolves the paths of a request as the agent's other operations
// do: Abs makes a relative path absolute under the workspace, Workspace is
// that directory.
type Paths interface {
	Abs(p string) string
	Workspace() (string, error)
}

// service implements ferry.agent.v1.Supervisor beside the Agent service of
// the same connection.
type service struct {
	agentv1.UnimplementedSupervisorServer
	paths Paths
}

// Register registers the Supervisor service on gs, resolving request
// paths with paths.
func Register(gs grpc.ServiceRegistrar, paths Paths) {
	agentv1.RegisterSupervisorServer(gs, &service{paths: paths})
}

func (v *service) Spawn(ctx context.Context, req *agentv1.SpawnRequest) (*agentv1.SpawnResponse, error) {
	if err := checkSpawn(req); err != nil {
		return nil, err
	}
	dir := filepath.Clean(v.paths.Abs(req.GetStateDir()))
	if st, ok, err := v.existing(ctx, dir, req.GetRunId()); err != nil || ok {
		return &agentv1.SpawnResponse{Status: st}, err
	}
	workdir := v.paths.Abs(req.GetWorkdir())
	if req.GetWorkdir() == "" {
		ws, err := v.paths.Workspace()
		if err != nil {
			return nil, status.Errorf(codes.Internal, "workspace: %v", err)
		}
		workdir = ws
	}
	log := filepath.Join(dir, outputFile)
	if req.GetLog() != "" {
		log = v.paths.Abs(req.GetLog())
	}
	spec := spawnSpec{
		RunID: req.GetRunId(), Argv: req.GetArgv(), Env: req.GetEnv(), Workdir: workdir, Log: log,
		TimeoutMS: req.GetTimeoutMs(), KillGraceMS: req.GetKillGraceMs(), CreatedMS: nowMS(),
	}
	// The state directory is made whole under a temporary name and
	// renamed into place: of two Spawns, one rename wins, and a state
	// directory always holds its spec.
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, wire.ToStatus(fmt.Errorf("spawn: create %s: %w", parent, err))
	}
	tmp, err := os.MkdirTemp(parent, ".ferry-spawn-")
	if err != nil {
		return nil, wire.ToStatus(fmt.Errorf("spawn: %w", err))
	}
	defer os.RemoveAll(tmp)
	if err := writeJSON(tmp, specFile, spec); err != nil {
		return nil, wire.ToStatus(fmt.Errorf("spawn: write spec: %w", err))
	}
	if err := os.Rename(tmp, dir); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
			// Another Spawn won.
			if st, ok, err := v.existing(ctx, dir, req.GetRunId()); err != nil || ok {
				return &agentv1.SpawnResponse{Status: st}, err
			}
		}
		return nil, wire.ToStatus(fmt.Errorf("spawn: place %s: %w", dir, err))
	}
	if err := startSupervisor(ctx, dir); err != nil {
		return nil, status.Errorf(codes.Internal, "spawn: %v", err)
	}
	st, err := readStatus(dir)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &agentv1.SpawnResponse{Spawned: true, Status: st}, nil
}

// existing reports the command already in dir, if there is one. A command
// whose supervisor never started (the agent died between placing the state
// directory and starting it) gets one now: the supervisor itself makes
// sure that a command runs at most once.
func (v *service) existing(ctx context.Context, dir, runID string) (*agentv1.RunStatus, bool, error) {
	st, err := readStatus(dir)
	if err != nil {
		return nil, false, wire.ToStatus(err)
	}
	if st.GetState() == agentv1.RunState_RUN_STATE_MISSING {
		return nil, false, nil
	}
	if st.GetRunId() != runID {
		return nil, true, status.Errorf(codes.AlreadyExists, "spawn %s: holds run %q, not %q", dir, st.GetRunId(), runID)
	}
	if st.GetPid() == 0 && (st.GetState() == agentv1.RunState_RUN_STATE_STARTING || st.GetState() == agentv1.RunState_RUN_STATE_LOST) && !lockHeld(dir) {
		if err := startSupervisor(ctx, dir); err != nil {
			return nil, true, status.Errorf(codes.Internal, "spawn: %v", err)
		}
		if st, err = readStatus(dir); err != nil {
			return nil, true, wire.ToStatus(err)
		}
	}
	return st, true, nil
}

func checkSpawn(req *agentv1.SpawnRequest) error {
	if err := wire.CheckRemotePath("spawn", req.GetStateDir()); err != nil {
		return wire.ToStatus(err)
	}
	if req.GetRunId() == "" || strings.ContainsAny(req.GetRunId(), "\x00\n\r") {
		return status.Errorf(codes.InvalidArgument, "spawn: invalid run id %q", req.GetRunId())
	}
	if len(req.GetArgv()) == 0 || req.GetArgv()[0] == "" {
		return status.Error(codes.InvalidArgument, "spawn: empty argv")
	}
	for _, a := range req.GetArgv() {
		if strings.Contains(a, "\x00") {
			return status.Error(codes.InvalidArgument, "spawn: NUL in an argument")
		}
	}
	for k, val := range req.GetEnv() {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(val, "\x00") {
			return status.Errorf(codes.InvalidArgument, "spawn: invalid environment variable %q", k)
		}
	}
	for _, p := range []string{req.GetWorkdir(), req.GetLog()} {
		if p != "" {
			if err := wire.CheckRemotePath("spawn", p); err != nil {
				return wire.ToStatus(err)
			}
		}
	}
	if req.GetTimeoutMs() < 0 || req.GetKillGraceMs() < 0 {
		return status.Error(codes.InvalidArgument, "spawn: negative timeout")
	}
	return nil
}

// startSupervisor runs `supervise DIR` on this binary and waits until the
// detachedEnv is env without relay.MarkVar: the supervisor and its
// command outlive the exec that started them, which its client may end
// by that mark (relay/openshell) when it is cancelled or its relay drops.
func detachedEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, relay.MarkVar+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// supervisor says the command runs (or could not be started, which it has
// recorded). Its output goes to the state directory's supervisor.log.
func startSupervisor(ctx context.Context, dir string) error {
	logf, err := os.OpenFile(filepath.Join(dir, superviseLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open supervisor log: %w", err)
	}
	defer logf.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	// The test binary re-executes itself the same way: its os.Args[0]
	// stands for the agent's.
	p, err := os.StartProcess("/proc/self/exe", []string{os.Args[0], "supervise", dir}, &os.ProcAttr{
		Env:   detachedEnv(os.Environ()),
		Files: []*os.File{null, logf, logf, w},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	w.Close()
	if err != nil {
		return fmt.Errorf("start supervisor: %w", err)
	}
	// The first process only detaches the supervisor and exits.
	ps, err := p.Wait()
	if err == nil && !ps.Success() {
		err = errors.New(ps.String())
	}
	if err != nil {
		return fmt.Errorf("start supervisor: %w (see %s)", err, filepath.Join(dir, superviseLog))
	}
	deadline := time.Now().Add(startTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	r.SetReadDeadline(deadline)
	line, err := bufio.NewReader(r).ReadString('\n')
	line = strings.TrimSpace(line)
	switch {
	case line == "ok":
		return nil
	case line != "":
		return errors.New("supervisor: " + line)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("supervisor did not report within %s (see %s)", startTimeout, filepath.Join(dir, superviseLog))
	default:
		return fmt.Errorf("supervisor ended without a report (see %s)", filepath.Join(dir, superviseLog))
	}
}

func (v *service) Status(ctx context.Context, req *agentv1.StatusRequest) (*agentv1.RunStatus, error) {
	if err := wire.CheckRemotePath("status", req.GetStateDir()); err != nil {
		return nil, wire.ToStatus(err)
	}
	st, err := readStatus(filepath.Clean(v.paths.Abs(req.GetStateDir())))
	return st, wire.ToStatus(err)
}

func (v *service) Signal(ctx context.Context, req *agentv1.SignalRequest) (*agentv1.RunStatus, error) {
	if err := wire.CheckRemotePath("signal", req.GetStateDir()); err != nil {
		return nil, wire.ToStatus(err)
	}
	dir := filepath.Clean(v.paths.Abs(req.GetStateDir()))
	sig, name := syscall.SIGTERM, "TERM"
	switch req.GetSignal() {
	case agentv1.Signal_SIGNAL_TERM:
	case agentv1.Signal_SIGNAL_KILL:
		sig, name = syscall.SIGKILL, "KILL"
	default:
		return nil, status.Errorf(codes.InvalidArgument, "signal: unknown signal %v", req.GetSignal())
	}
	st, err := readStatus(dir)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	switch st.GetState() {
	case agentv1.RunState_RUN_STATE_MISSING, agentv1.RunState_RUN_STATE_EXITED:
		return st, nil
	}
	// The marker first, then the pid: a supervisor that records its pid
	// after this read finds the marker (it looks after recording).
	if err := writeAtomic(dir, stopFile, []byte(name+"\n")); err != nil {
		return nil, wire.ToStatus(fmt.Errorf("signal: %w", err))
	}
	if st, err = readStatus(dir); err != nil {
		return nil, wire.ToStatus(err)
	}
	if pid := int(st.GetPid()); pid > 0 && st.GetState() != agentv1.RunState_RUN_STATE_EXITED && leadsRun(dir, pid) {
		if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return nil, wire.ToStatus(fmt.Errorf("signal process group %d: %w", pid, err))
		}
	}
	return st, nil
}

// leadsRun reports whether pid still leads the command's process group in the
// supervisor's session. The supervisor reaps the command only after its
// last signal to the group, so a pid that is gone, or leads another group
// or session, was reused: signalling it would hit a stranger.
func leadsRun(dir string, pid int) bool {
	var rec pidRecord
	if readJSON(filepath.Join(dir, pidFile), &rec) != nil || rec.Pid != pid {
		return false
	}
	pgid, err := unix.Getpgid(pid)
	if err != nil || pgid != pid {
		return false
	}
	sid, err := unix.Getsid(pid)
	return err == nil && (rec.Sid == 0 || sid == rec.Sid)
}

// readStatus reads the state directory dir.
func readStatus(dir string) (*agentv1.RunStatus, error) {
	var spec spawnSpec
	if err := readJSON(filepath.Join(dir, specFile), &spec); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return &agentv1.RunStatus{State: agentv1.RunState_RUN_STATE_MISSING}, nil
		}
		return nil, fmt.Errorf("status %s: %w", dir, err)
	}
	st := &agentv1.RunStatus{RunId: spec.RunID}
	var pid pidRecord
	hasPid := readJSON(filepath.Join(dir, pidFile), &pid) == nil
	if hasPid {
		st.Pid, st.StartedUnixMs = int32(pid.Pid), pid.StartedMS
	}
	exited := func() bool {
		var rec exitRecord
		if readJSON(filepath.Join(dir, exitFile), &rec) != nil {
			return false
		}
		st.State = agentv1.RunState_RUN_STATE_EXITED
		st.ExitCode, st.TimedOut, st.EndedUnixMs, st.Error = int32(rec.ExitCode), rec.TimedOut, rec.EndedMS, rec.Error
		return true
	}
	if exited() {
		return st, nil
	}
	held := lockHeld(dir)
	// The supervisor records the exit before it lets go of the lock.
	if exited() {
		return st, nil
	}
	switch {
	case held && hasPid:
		st.State = agentv1.RunState_RUN_STATE_RUNNING
	case held, !hasPid && time.Since(time.UnixMilli(spec.CreatedMS)) < startGrace:
		st.State = agentv1.RunState_RUN_STATE_STARTING
	default:
		st.State = agentv1.RunState_RUN_STATE_LOST
	}
	return st, nil
}

// lockHeld reports whether a supervisor holds dir's lock.
func lockHeld(dir string) bool {
	f, err := os.Open(filepath.Join(dir, lockFile))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}
