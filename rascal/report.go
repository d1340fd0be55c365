package rascal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/renameio/v2"
)

// Rascal's worker reports meta.json's result on the orchestrator's Unix
// socket (Spec.ResultReportSocketPath, RASCAL_RUN_RESULT_SOCKET in the
// container) as it exits, and rascald then trusts that report over
// meta.json. No Unix socket of the host reaches a remote sandbox, so the
// Runner reports for the worker, from the host, once the run's artifacts
// are in: Rascal's request and answer (internal/runner/report.go), made
// when Inspect or Stop first sees the run ended, before rascald reads
// anything. The report names the run the Runner started, never another:
// meta.json is the sandbox's to write.
const (
	// reportFile, in the run directory, is a report still to make:
	// pendingReport. The artifact pull writes only the artifacts' names,
	// so the sandbox cannot plant one.
	reportFile = ".ferry-rascal-report.json"
	// maxMetaBytes bounds the meta.json read for a report.
	maxMetaBytes = 1 << 20
	// reportAttempts and reportDelay bound a report to an orchestrator
	// that is not listening (Rascal's worker tries 20 times, 500 ms apart,
	// but here the orchestrator is the caller, so it is up).
	reportAttempts = 3
	reportDelay    = 250 * time.Millisecond
)

// pendingReport is where and for which run the report goes.
type pendingReport struct {
	RunID  string `json:"run_id"`
	Socket string `json:"socket"`
}

// planReport records, in the run directory, that the run's result is to
// be reported on socket.
func planReport(dir, runID, socket string) error {
	b, err := json.Marshal(pendingReport{RunID: runID, Socket: socket})
	if err != nil {
		return fmt.Errorf("plan result report: %w", err)
	}
	if err := renameio.WriteFile(filepath.Join(dir, reportFile), b, 0o600, renameio.WithStaticPermissions(0o600)); err != nil {
		return fmt.Errorf("plan result report: %w", err)
	}
	return nil
}

// report makes the run's planned report, once: whatever happens, the plan
// is gone after it, as the worker reports once at its exit. A failure is
// logged, as the worker logs it; rascald then reads meta.json itself.
func (r *Runner) report(ctx context.Context, h ExecutionHandle) {
	dir, err := r.l.RunDir(ferryHandle(h))
	if err != nil {
		return
	}
	p := filepath.Join(dir, reportFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	defer os.Remove(p)
	var plan pendingReport
	if err == nil {
		err = json.Unmarshal(b, &plan)
	}
	if err != nil {
		r.log.Warn("cannot read the result report's plan", "run_dir", dir, "err", err)
		return
	}
	res, err := readResult(filepath.Join(dir, "meta.json"), plan.RunID)
	if err != nil {
		r.log.Warn("run result not reported", "run_id", plan.RunID, "err", err)
		return
	}
	err = reportResult(ctx, plan.Socket, res)
	for i := 1; i < reportAttempts && err != nil && !errors.Is(err, errRejected) && sleep(ctx, reportDelay); i++ {
		err = reportResult(ctx, plan.Socket, res)
	}
	if err != nil {
		r.log.Warn("failed to report run result", "run_id", plan.RunID, "socket", plan.Socket, "err", err)
		return
	}
	r.log.Info("run result reported", "run_id", plan.RunID, "exit_code", res.ExitCode)
}

// readResult is the result meta.json holds for the run runID. A meta.json
// naming another run is refused: a sandbox must not report for a run not
// its own.
func readResult(p, runID string) (RunResult, error) {
	f, err := os.Open(p)
	if err != nil {
		return RunResult{}, fmt.Errorf("read meta file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxMetaBytes+1))
	if err != nil {
		return RunResult{}, fmt.Errorf("read meta file %s: %w", p, err)
	}
	if len(b) > maxMetaBytes {
		return RunResult{}, fmt.Errorf("meta file %s: over %d bytes", p, maxMetaBytes)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return RunResult{}, fmt.Errorf("meta file %s: %w", p, err)
	}
	if id := strings.TrimSpace(m.RunID); id != "" && id != runID {
		return RunResult{}, fmt.Errorf("meta file %s names run %q, not %s", p, id, runID)
	}
	res := m.RunResult()
	res.RunID = runID
	return res, nil
}

// errRejected is the orchestrator's refusal of a report: trying again
// would not change it.
var errRejected = errors.New("run result report rejected")

// reportResult is Rascal's ReportRunResult: one JSON request, one JSON
// answer, within Rascal's deadlines.
func reportResult(ctx context.Context, socket string, res RunResult) error {
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("dial run result socket %s: %w", socket, err)
	}
	defer conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return fmt.Errorf("set run result socket deadline: %w", err)
	}
	if err := json.NewEncoder(conn).Encode(res); err != nil {
		return fmt.Errorf("encode run result report: %w", err)
	}
	var resp RunResultReportResponse
	if err := json.NewDecoder(io.LimitReader(conn, 64<<10)).Decode(&resp); err != nil {
		return fmt.Errorf("decode run result response: %w", err)
	}
	if !resp.OK {
		if e := strings.TrimSpace(resp.Error); e != "" {
			return fmt.Errorf("%w: %s", errRejected, e)
		}
		return errRejected
	}
	return nil
}

// sleep waits d, or less if ctx ends first; it reports whether it waited
// all of d.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
