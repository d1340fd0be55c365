package rascal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ferryrascal "github.com/ferry-dev/ferry/rascal"
)

// rascald is Rascal's orchestrator as far as it drives a Runner
// (internal/orchestrator/execution.go, ExecuteRun, superviseRun,
// finalizeDetachedRun, RecoverRunningRuns, cleanupDetachedExecution), its
// store a JSON file in its data directory, so that a new rascald over the
// same directory is a new process taking over.
type rascald struct {
	t      *testing.T
	runner Runner
	data   string
	sock   string
	mode   SessionMode
	// tick is runSupervisorTick, 1 s in Rascal, scaled down.
	tick time.Duration
	// timings, when set, receives each call's duration.
	timings *timings
}

// run is state.Run, as much of it as a run needs.
type run struct {
	ID, TaskID, Repo, Instruction string
	AgentRuntime                  Runtime
	Trigger                       Name
	BaseBranch, HeadBranch        string
}

// db is rascald's store: run executions and task sessions.
type db struct {
	// Executions are state.RunExecution: Backend, ContainerName,
	// ContainerID, Status.
	Executions map[string]execution `json:"executions"`
	// Sessions are state.TaskSession by task id.
	Sessions map[string]taskSession `json:"sessions"`
}

type execution struct {
	Backend, ContainerName, ContainerID, Status string
	// Reported is the result the run reported on the result socket
	// (ReportRunExecutionResult), nil until it has.
	Reported *RunResult `json:",omitempty"`
}

type taskSession struct {
	AgentRuntime     Runtime
	RuntimeSessionID string
	SessionKey       string
	SessionRoot      string
}

// outcome is how rascald ended a run.
type outcome struct {
	Status   string // succeeded, review, failed, canceled
	Error    string
	ExitCode int
	Meta     meta
	// Reported: the result came on the result socket, and finalize took
	// it over meta.json, as loadDetachedRunMeta does.
	Reported bool
}

// meta is runner.Meta.
type meta struct {
	RunID         string `json:"run_id"`
	TaskID        string `json:"task_id"`
	Repo          string `json:"repo"`
	BaseBranch    string `json:"base_branch"`
	HeadBranch    string `json:"head_branch"`
	PRNumber      int    `json:"pr_number"`
	PRURL         string `json:"pr_url"`
	HeadSHA       string `json:"head_sha"`
	TaskSessionID string `json:"task_session_id,omitempty"`
	ExitCode      int    `json:"exit_code"`
	Error         string `json:"error,omitempty"`
}

var dbMu sync.Mutex

func (d *rascald) load() db {
	dbMu.Lock()
	defer dbMu.Unlock()
	s := db{Executions: map[string]execution{}, Sessions: map[string]taskSession{}}
	if b, err := os.ReadFile(filepath.Join(d.data, "db.json")); err == nil {
		if err := json.Unmarshal(b, &s); err != nil {
			d.t.Fatal(err)
		}
	}
	return s
}

func (d *rascald) update(fn func(*db)) {
	s := d.load()
	fn(&s)
	dbMu.Lock()
	defer dbMu.Unlock()
	b, _ := json.Marshal(s)
	if err := os.WriteFile(filepath.Join(d.data, "db.json"), b, 0o644); err != nil {
		d.t.Fatal(err)
	}
}

func (d *rascald) runDir(id string) string { return filepath.Join(d.data, "runs", id) }

// writeRunFiles is Server.WriteRunFiles.
func (d *rascald) writeRunFiles(r run) {
	dir := d.runDir(r.ID)
	must(d.t, os.MkdirAll(filepath.Join(dir, "codex"), 0o755))
	ctxJSON, _ := json.Marshal(map[string]any{"run_id": r.ID, "task_id": r.TaskID, "repo": r.Repo, "instruction": r.Instruction, "trigger": r.Trigger})
	must(d.t, os.WriteFile(filepath.Join(dir, "context.json"), ctxJSON, 0o644))
	must(d.t, os.WriteFile(filepath.Join(dir, "instructions.md"), []byte("# Task\n\n"+r.Instruction+"\n"), 0o644))
	must(d.t, os.WriteFile(filepath.Join(dir, "persistent_instructions.md"), []byte("- Keep changes minimal.\n"), 0o644))
	// The credential broker's auth file (credentials.AuthPath).
	secrets := ferryrascal.SecretsDir(dir)
	must(d.t, os.MkdirAll(secrets, 0o700))
	if ferryrascal.Runtime(r.AgentRuntime).Provider() == ferryrascal.ModelProviderAnthropic {
		must(d.t, os.WriteFile(filepath.Join(secrets, "claude_oauth_token"), []byte(testClaudeToken), 0o600))
	} else {
		must(d.t, os.WriteFile(filepath.Join(secrets, "codex_auth.json"), []byte(`{"token":"`+testCodexToken+`"}`), 0o600))
	}
	must(d.t, os.WriteFile(filepath.Join(dir, "runner.log"), []byte(fmt.Sprintf("[%s] queued run=%s task=%s trigger=%s\n", time.Now().UTC().Format(time.RFC3339), r.ID, r.TaskID, r.Trigger)), 0o644))
}

// spec is ExecuteRun's spec, the task session decided as it decides it.
func (d *rascald) spec(r run) Spec {
	resume := ferryrascal.SessionEnabled(ferryrascal.SessionMode(d.mode), ferryrascal.TriggerName(r.Trigger))
	var key, dir, sid string
	if resume {
		key = ferryrascal.TaskSessionKey(r.Repo, r.TaskID)
		dir = filepath.Join(d.data, "agent-sessions", key)
		if ex, ok := d.load().Sessions[r.TaskID]; ok {
			if ex.AgentRuntime == r.AgentRuntime {
				sid = strings.TrimSpace(ex.RuntimeSessionID)
			} else {
				d.update(func(s *db) { delete(s.Sessions, r.TaskID) })
			}
		}
		if sid == "" && ferryrascal.Runtime(r.AgentRuntime).Harness() == ferryrascal.HarnessGoose {
			sid = ferryrascal.TaskSessionName(r.Repo, r.TaskID)
		}
		must(d.t, os.MkdirAll(dir, 0o755))
		d.update(func(s *db) {
			s.Sessions[r.TaskID] = taskSession{AgentRuntime: r.AgentRuntime, RuntimeSessionID: sid, SessionKey: key, SessionRoot: dir}
		})
	}
	runDir := d.runDir(r.ID)
	return Spec{
		RunID: r.ID, TaskID: r.TaskID, Repo: r.Repo, Instruction: r.Instruction, AgentRuntime: r.AgentRuntime,
		BaseBranch: r.BaseBranch, HeadBranch: r.HeadBranch, Trigger: r.Trigger, RunDir: runDir,
		SecretsDir: ferryrascal.SecretsDir(runDir), Context: "ctx " + r.ID, Debug: true,
		ResultReportSocketPath: d.sock,
		TaskSession:            TaskSessionSpec{Mode: d.mode, Resume: resume, TaskDir: dir, TaskKey: key, RuntimeSessionID: sid},
	}
}

// start is ExecuteRun up to the supervision: the pending handle saved
// first, then StartDetached, then the handle it returned.
func (d *rascald) start(ctx context.Context, r run) error {
	d.writeRunFiles(r)
	spec := d.spec(r)
	pending := ExecutionHandle{Backend: ExecutionBackendDocker, Name: ferryrascal.ExecutionHandleForRun(r.ID).Name}
	d.update(func(s *db) {
		s.Executions[r.ID] = execution{Backend: string(pending.Backend), ContainerName: pending.Name, ContainerID: pending.Name, Status: "created"}
	})
	t0 := time.Now()
	h, err := d.runner.StartDetached(ctx, spec)
	d.timings.add("start", time.Since(t0))
	if err != nil {
		d.update(func(s *db) { delete(s.Executions, r.ID) })
		return err
	}
	d.update(func(s *db) {
		s.Executions[r.ID] = execution{Backend: string(h.Backend), ContainerName: strings.TrimSpace(h.Name), ContainerID: strings.TrimSpace(h.ID), Status: "running"}
	})
	return nil
}

// execute is ExecuteRun: start, then supervise.
func (d *rascald) execute(ctx context.Context, r run) outcome {
	if err := d.start(ctx, r); err != nil {
		return outcome{Status: "failed", Error: err.Error()}
	}
	return d.supervise(ctx, r)
}

func (d *rascald) handleOf(id string) (ExecutionHandle, bool) {
	e, ok := d.load().Executions[id]
	return ExecutionHandle{Backend: ExecutionBackend(e.Backend), ID: e.ContainerID, Name: e.ContainerName}, ok
}

// supervise is superviseRun: Inspect every tick until not running, then
// finalizeDetachedRun. stop, when it is closed, asks for the run's
// cancellation as a pending cancel does: Stop(handle, 10 s).
func (d *rascald) supervise(ctx context.Context, r run) outcome {
	return d.superviseStop(ctx, r, nil)
}

func (d *rascald) superviseStop(ctx context.Context, r run, cancel <-chan struct{}) outcome {
	h, ok := d.handleOf(r.ID)
	if !ok {
		d.t.Fatalf("run %s has no execution", r.ID)
	}
	tick := time.NewTicker(d.tick)
	defer tick.Stop()
	stopRequested, canceled := false, false
	for {
		select {
		case <-ctx.Done():
			return outcome{Status: "abandoned"}
		case <-tick.C:
		}
		t0 := time.Now()
		st, err := d.runner.Inspect(ctx, h)
		dt := time.Since(t0)
		if errors.Is(err, ErrExecutionNotFound) {
			return d.failMissing(r)
		}
		if err != nil {
			if ctx.Err() == nil {
				d.t.Logf("run %s inspect failed: %v", r.ID, err)
			}
			continue
		}
		if st.Running {
			d.timings.add("inspect", dt)
			select {
			case <-cancel:
				canceled = true
				if !stopRequested {
					if err := d.runner.Stop(ctx, h, 10*time.Second); err != nil && !errors.Is(err, ErrExecutionNotFound) {
						d.t.Errorf("run %s stop: %v", r.ID, err)
					}
					stopRequested = true
				}
			default:
			}
			continue
		}
		d.timings.add("finish", dt)
		code := 0
		if st.ExitCode != nil {
			code = *st.ExitCode
		}
		return d.finalize(r, code, canceled)
	}
}

// failMissing is failRunForMissingExecution.
func (d *rascald) failMissing(r run) outcome {
	d.update(func(s *db) { delete(s.Executions, r.ID) })
	return outcome{Status: "failed", Error: "detached container missing during adoption"}
}

// finalize is finalizeDetachedRun: meta.json from the run directory (a
// fallback when there is none), the task session id, the status, then
// cleanupDetachedExecution.
func (d *rascald) finalize(r run, observed int, canceled bool) outcome {
	var m meta
	rep := d.load().Executions[r.ID].Reported
	var err error
	if rep != nil {
		m = meta{RunID: r.ID, TaskID: r.TaskID, Repo: r.Repo, BaseBranch: r.BaseBranch, HeadBranch: r.HeadBranch,
			PRNumber: rep.PRNumber, PRURL: rep.PRURL, HeadSHA: rep.HeadSHA, TaskSessionID: rep.TaskSessionID,
			ExitCode: rep.ExitCode, Error: rep.Error}
	} else {
		var b []byte
		if b, err = os.ReadFile(filepath.Join(d.runDir(r.ID), "meta.json")); err == nil {
			err = json.Unmarshal(b, &m)
		}
	}
	if err != nil {
		m = meta{RunID: r.ID, TaskID: r.TaskID, Repo: r.Repo, ExitCode: observed}
		if observed != 0 {
			m.Error = fmt.Sprintf("docker runner failed with exit code %d", observed)
		}
	} else if m.ExitCode == 0 && observed != 0 && rep == nil {
		m.ExitCode = observed
	}
	if sid := strings.TrimSpace(m.TaskSessionID); sid != "" {
		d.update(func(s *db) {
			ex := s.Sessions[r.TaskID]
			if ex.AgentRuntime != r.AgentRuntime {
				ex = taskSession{}
			}
			ex.AgentRuntime, ex.RuntimeSessionID = r.AgentRuntime, sid
			s.Sessions[r.TaskID] = ex
		})
	}
	o := outcome{Status: "succeeded", ExitCode: m.ExitCode, Meta: m, Reported: rep != nil}
	switch {
	case m.ExitCode != 0 || strings.TrimSpace(m.Error) != "":
		o.Status, o.Error = "failed", strings.TrimSpace(m.Error)
		if o.Error == "" {
			o.Error = fmt.Sprintf("docker runner failed with exit code %d", m.ExitCode)
		}
		if canceled {
			o.Status = "canceled"
		}
	case m.PRNumber > 0 || m.PRURL != "":
		o.Status = "review"
	}
	d.cleanup(r)
	return o
}

// cleanup is cleanupDetachedExecution: Remove, whose not-found is no
// failure, then the execution forgotten.
func (d *rascald) cleanup(r run) {
	h, _ := d.handleOf(r.ID)
	if err := d.runner.Remove(context.Background(), h); err != nil && !errors.Is(err, ErrExecutionNotFound) {
		d.t.Errorf("run %s remove: %v", r.ID, err)
	}
	d.update(func(s *db) { delete(s.Executions, r.ID) })
}

// recover is RecoverRunningRuns and recoverDetachedRun for one run: a
// new process finds the run's execution and adopts it.
func (d *rascald) recover(ctx context.Context, r run) outcome {
	h, ok := d.handleOf(r.ID)
	if !ok {
		d.t.Fatalf("run %s: no execution to recover", r.ID)
	}
	st, err := d.runner.Inspect(ctx, h)
	switch {
	case errors.Is(err, ErrExecutionNotFound):
		return d.failMissing(r)
	case err != nil:
		d.t.Logf("recover run %s inspect failed, adopting with retry loop: %v", r.ID, err)
		return d.supervise(ctx, r)
	case st.Running:
		return d.supervise(ctx, r)
	}
	code := 0
	if st.ExitCode != nil {
		code = *st.ExitCode
	}
	return d.finalize(r, code, false)
}

// timings collects durations by name.
type timings struct {
	mu sync.Mutex
	d  map[string][]time.Duration
}

func (t *timings) add(name string, d time.Duration) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.d == nil {
		t.d = map[string][]time.Duration{}
	}
	t.d[name] = append(t.d[name], d)
}

func (t *timings) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for _, name := range []string{"start", "inspect", "finish"} {
		ds := t.d[name]
		if len(ds) == 0 {
			continue
		}
		var sum, max time.Duration
		for _, d := range ds {
			sum += d
			if d > max {
				max = d
			}
		}
		fmt.Fprintf(&b, "%s: n=%d mean=%.1fms max=%.1fms; ", name, len(ds), float64(sum.Microseconds())/float64(len(ds))/1000, float64(max.Microseconds())/1000)
	}
	return b.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// serveResults is serveRunResultReports and handleRunResultReport: one
// JSON RunResult a connection, recorded on the run's execution, answered
// with Rascal's response. It returns the socket's path, short enough for
// a Unix socket's 108 bytes.
func serveResults(t *testing.T, d *rascald) string {
	dir, err := os.MkdirTemp("", "rr")
	must(t, err)
	sock := filepath.Join(dir, "run-results.sock")
	ln, err := net.Listen("unix", sock)
	must(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				answer := func(resp RunResultReportResponse) { json.NewEncoder(conn).Encode(resp) }
				var res RunResult
				if err := json.NewDecoder(conn).Decode(&res); err != nil {
					answer(RunResultReportResponse{Error: fmt.Sprintf("decode request: %v", err)})
					return
				}
				id := strings.TrimSpace(res.RunID)
				if id == "" {
					answer(RunResultReportResponse{Error: "run id is required"})
					return
				}
				found := false
				d.update(func(s *db) {
					if e, ok := s.Executions[id]; ok {
						e.Reported, found = &res, true
						s.Executions[id] = e
					}
				})
				if !found {
					answer(RunResultReportResponse{Error: "run execution not found"})
					return
				}
				answer(RunResultReportResponse{OK: true})
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		os.RemoveAll(dir)
	})
	return sock
}
