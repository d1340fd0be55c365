package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
)

// The sandbox log is what GetSandboxLogs and WatchSandbox(follow_logs)
// serve: one openshell.v1.SandboxLogLine per lifecycle event (created,
// ready, deleting) and per exec (argv, workdir, environment keys, how it
// ended, exit code, byte counts, duration).
//
// Secrets are kept out by construction, not by scrubbing: a record never
// holds stdin, output or an environment value, only what the request's
// argv and workdir say and the environment's keys. ferry itself never puts
// a secret in argv or in the environment (it sends secrets through stdin,
// which is only counted), so for ferry's traffic the log is secret-free.
// A client that does put a secret in argv should know that this gateway,
// like upstream, logs argv.
const (
	// logTailLines is upstream's per-sandbox tail (TracingLogBus
	// DEFAULT_TAIL) and GetSandboxLogs's default lines.
	logTailLines = 2000
	// logMaxBytes bounds one sandbox's buffered records, so that a whole
	// GetSandboxLogs answer stays under the 4 MiB a default gRPC client
	// accepts.
	logMaxBytes = 2 << 20
	// logFieldMax clips one field's value (a long argv): a record stays
	// small whatever the request carried.
	logFieldMax = 4 << 10
	// logLineMax is the longest record read back from disk; longer lines
	// were not written by this package and are skipped.
	logLineMax = 64 << 10
	// watchTailLines is upstream's WatchSandbox default log_tail_lines.
	watchTailLines = 200

	logSource = "gateway"
	logTarget = "ferry::gateway"
	levelInfo = "INFO"
	levelWarn = "WARN"
)

// logEntry is one buffered record and its place in the sandbox's sequence.
type logEntry struct {
	seq  uint64
	line *openshellv1.SandboxLogLine
	size int
}

// logRing is one sandbox's records. Its fields are guarded by logBook.mu;
// a line, once added, is never changed, so it may be shared.
type logRing struct {
	id      string
	entries []logEntry // oldest first
	bytes   int
	next    uint64        // seq of the next record
	changed chan struct{} // closed at the next record or at drop
	dropped bool
	// What the ring's file holds, to know when to compact it.
	fileLines int
	fileBytes int64
}

// logBook holds the sandboxes' rings and persists them under dir, one file
// of JSON lines per sandbox id, so that a restarted gateway still answers.
// A file is rewritten from its ring once it holds twice the ring's bounds.
type logBook struct {
	dir   string
	log   *slog.Logger
	known func(id string) bool // whether the sandbox exists

	mu    sync.Mutex
	rings map[string]*logRing
}

func newLogBook(dir string, log *slog.Logger, known func(string) bool) (*logBook, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create log dir: %w", err)
	}
	return &logBook{dir: dir, log: log, known: known, rings: map[string]*logRing{}}, nil
}

func (b *logBook) path(id string) string { return filepath.Join(b.dir, id+".ndjson") }

// prune removes the files of sandboxes that no longer exist (deleted while
// a record was being written, or by a gateway that crashed).
func (b *logBook) prune() {
	ents, err := os.ReadDir(b.dir)
	if err != nil {
		b.log.Warn("read sandbox log dir", "err", err)
		return
	}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".ndjson")
		if !ok {
			id, ok = strings.CutSuffix(e.Name(), ".ndjson.tmp")
		}
		if ok && !b.known(id) {
			_ = os.Remove(filepath.Join(b.dir, e.Name()))
		}
	}
}

// ring returns id's ring, loading it from disk the first time; nil if the
// sandbox does not exist. Callers hold b.mu.
func (b *logBook) ring(id string) *logRing {
	if r, ok := b.rings[id]; ok {
		return r
	}
	if !b.known(id) {
		return nil
	}
	r := &logRing{id: id, changed: make(chan struct{})}
	b.load(r)
	b.rings[id] = r
	return r
}

// load reads r's file, keeping the newest records within the bounds.
func (b *logBook) load(r *logRing) {
	f, err := os.Open(b.path(r.id))
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		b.log.Warn("open sandbox log", "sandbox_id", r.id, "err", err)
		return
	}
	defer f.Close()
	br := bufio.NewReader(f)
	for {
		raw, err := readLine(br, logLineMax)
		if len(raw) > 0 {
			r.fileLines++
			r.fileBytes += int64(len(raw)) + 1
			line := &openshellv1.SandboxLogLine{}
			if uerr := protojson.Unmarshal(raw, line); uerr == nil && line.GetSandboxId() == r.id {
				r.push(line, len(raw))
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				b.log.Warn("read sandbox log", "sandbox_id", r.id, "err", err)
			}
			return
		}
	}
}

// readLine returns the next line without its newline; a line longer than
// max is skipped whole and returned empty.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	long := false
	for {
		frag, err := br.ReadSlice('\n')
		if !long {
			line = append(line, frag...)
			if len(line) > max {
				long, line = true, nil
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), err
	}
}

// push appends a record, dropping the oldest past the bounds. Callers hold
// the book's lock.
func (r *logRing) push(line *openshellv1.SandboxLogLine, size int) {
	r.entries = append(r.entries, logEntry{seq: r.next, line: line, size: size})
	r.next++
	r.bytes += size
	for len(r.entries) > logTailLines || (r.bytes > logMaxBytes && len(r.entries) > 1) {
		r.bytes -= r.entries[0].size
		r.entries[0] = logEntry{}
		r.entries = r.entries[1:]
	}
}

// add records one line for sandbox id; it does nothing for a sandbox that
// does not exist (any more). A failure to persist is logged, and the
// record is still served from memory.
func (b *logBook) add(id, level, msg string, fields map[string]string) {
	b.addLine(&openshellv1.SandboxLogLine{
		SandboxId: id,
		Level:     level,
		Target:    logTarget,
		Message:   msg,
		Source:    logSource,
		Fields:    fields,
	})
}

// addLine is add for a record of any level, target and source; it stamps
// the time.
func (b *logBook) addLine(line *openshellv1.SandboxLogLine) {
	id := line.GetSandboxId()
	line.TimestampMs = time.Now().UnixMilli()
	raw, err := protojson.Marshal(line)
	if err != nil {
		b.log.Warn("encode sandbox log", "sandbox_id", id, "err", err)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.ring(id)
	if r == nil || r.dropped {
		return
	}
	r.push(line, len(raw))
	close(r.changed)
	r.changed = make(chan struct{})
	if err := b.persist(r, raw); err != nil {
		b.log.Warn("write sandbox log", "sandbox_id", id, "err", err)
	}
}

// persist appends raw to r's file, or rewrites the file from the ring once
// it has grown to twice the ring's bounds. Callers hold b.mu.
func (b *logBook) persist(r *logRing, raw []byte) error {
	if r.fileLines+1 > 2*logTailLines || r.fileBytes+int64(len(raw))+1 > 2*logMaxBytes {
		return b.compact(r)
	}
	f, err := os.OpenFile(b.path(r.id), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(raw, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	r.fileLines++
	r.fileBytes += int64(len(raw)) + 1
	return nil
}

// compact rewrites r's file from the ring, through a temp file and rename
// so that a crash leaves either file whole. Callers hold b.mu.
func (b *logBook) compact(r *logRing) error {
	var buf bytes.Buffer
	for _, e := range r.entries {
		raw, err := protojson.Marshal(e.line)
		if err != nil {
			return err
		}
		buf.Write(raw)
		buf.WriteByte('\n')
	}
	tmp := b.path(r.id) + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, b.path(r.id)); err != nil {
		return err
	}
	r.fileLines, r.fileBytes = len(r.entries), int64(buf.Len())
	return nil
}

// drop forgets a deleted sandbox's records, on disk too, and ends its
// followers' streams.
func (b *logBook) drop(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r, ok := b.rings[id]; ok {
		// Followers still holding r read its last records from it.
		r.dropped = true
		close(r.changed)
		delete(b.rings, id)
	}
	if err := os.Remove(b.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		b.log.Warn("remove sandbox log", "sandbox_id", id, "err", err)
	}
}

// tail returns the newest n records of id, its ring, the seq of the next
// record and a channel closed when it is added (or the ring dropped), for
// after. The ring is nil for an unknown sandbox.
func (b *logBook) tail(id string, n int) (lines []*openshellv1.SandboxLogLine, r *logRing, next uint64, changed <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r = b.ring(id)
	if r == nil || r.dropped {
		return nil, nil, 0, nil
	}
	es := r.entries[max(0, len(r.entries)-n):]
	lines = make([]*openshellv1.SandboxLogLine, len(es))
	for i, e := range es {
		lines[i] = e.line
	}
	return lines, r, r.next, r.changed
}

// after returns r's records from seq on (those still buffered), the seq
// after them, and a channel closed at the next record; gone is true once
// the sandbox's log has been dropped, and then lines are its last ones.
func (b *logBook) after(r *logRing, seq uint64) (lines []*openshellv1.SandboxLogLine, next uint64, changed <-chan struct{}, gone bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range r.entries {
		if e.seq >= seq {
			lines = append(lines, e.line)
		}
	}
	return lines, r.next, r.changed, r.dropped
}

// logFilter is the selection GetSandboxLogs and WatchSandbox offer, with
// upstream's semantics: since_ms drops older records, sources keeps the
// named sources (an empty source counts as "gateway"), min_level keeps
// records at least that severe.
type logFilter struct {
	sinceMs  int64
	sources  []string
	minLevel string
}

func (f logFilter) match(l *openshellv1.SandboxLogLine) bool {
	if f.sinceMs > 0 && l.GetTimestampMs() < f.sinceMs {
		return false
	}
	if len(f.sources) > 0 {
		src := l.GetSource()
		if src == "" {
			src = logSource
		}
		found := false
		for _, s := range f.sources {
			found = found || s == src
		}
		if !found {
			return false
		}
	}
	return f.minLevel == "" || levelRank(l.GetLevel()) <= levelRank(f.minLevel)
}

// levelRank orders levels as upstream's level_matches does: lower is more
// severe, and an unknown level ranks after TRACE.
func levelRank(level string) int {
	switch strings.ToUpper(level) {
	case "ERROR":
		return 0
	case "WARN":
		return 1
	case "INFO", "OCSF":
		return 2
	case "DEBUG":
		return 3
	case "TRACE":
		return 4
	}
	return 5
}

// GetSandboxLogs returns a sandbox's newest log records: the last `lines`
// buffered (default 2000), then filtered by since_ms, sources and
// min_level. buffer_total is how many records the tail held before the
// filters, as upstream reports it. An unknown sandbox is NOT_FOUND, as
// upstream's fetch_and_authorize_sandbox makes it; the request's workspace
// is not looked at, as upstream (grpc/policy.rs handle_get_sandbox_logs)
// does not look at it: the id alone names the sandbox.
func (s *Server) GetSandboxLogs(ctx context.Context, req *openshellv1.GetSandboxLogsRequest) (*openshellv1.GetSandboxLogsResponse, error) {
	id := req.GetSandboxId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "sandbox_id is required")
	}
	if _, ok := s.reg.lookup(id); !ok {
		return nil, status.Error(codes.NotFound, "sandbox not found")
	}
	n := int(req.GetLines())
	if n == 0 {
		n = logTailLines
	}
	tail, r, _, _ := s.logs.tail(id, n)
	if r == nil {
		return nil, status.Error(codes.NotFound, "sandbox not found")
	}
	f := logFilter{sinceMs: req.GetSinceMs(), sources: req.GetSources(), minLevel: req.GetMinLevel()}
	resp := &openshellv1.GetSandboxLogsResponse{BufferTotal: uint32(len(tail))}
	for _, l := range tail {
		if f.match(l) {
			resp.Logs = append(resp.Logs, l)
		}
	}
	return resp, nil
}

// logEvent records a lifecycle event of sandbox id.
func (s *Server) logEvent(id, msg string, fields map[string]string) {
	s.logs.add(id, levelInfo, msg, fields)
}

// execCounts counts the bytes an exec moved.
type execCounts struct {
	stdin, stdout, stderr atomic.Int64
}

// countReader counts what is read through it. The exec's stdin pump may
// still read after the exec has ended (relay.Execer's contract), hence the
// atomic counter.
type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c countReader) WriteTo(w io.Writer) (int64, error) {
	return writeTo(c.r, countWriter{w: w, n: c.n})
}

type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// count makes cmd's streams count into n.
func (n *execCounts) count(cmd *relay.Command) {
	cmd.Stdin = countReader{r: cmd.Stdin, n: &n.stdin}
	cmd.Stdout = countWriter{w: cmd.Stdout, n: &n.stdout}
	cmd.Stderr = countWriter{w: cmd.Stderr, n: &n.stderr}
}

// execEnd is how an exec ended, in the terms the log uses, given what
// runner.Exec returned, the exec context's cause and the client's context
// error. It mirrors the classification in exec.
func execEnd(cmd *relay.Command, elapsed time.Duration, code int, err, cause, clientErr error) string {
	switch {
	case err == nil && code == relay.ExitTimeout && cmd.Timeout > 0 && elapsed >= cmd.Timeout:
		return "timeout"
	case err == nil:
		return "exit"
	case errors.Is(cause, errCut), errors.Is(err, errCut):
		return "cut"
	case errors.Is(cause, errDeleted):
		return "deleted"
	case errors.Is(cause, errStopped):
		return "stopped"
	case clientErr != nil:
		return "cancel"
	}
	return "error"
}

// logExec records one exec of a sandbox: what ran and how it ended, never
// its stdin, output or environment values.
func (s *Server) logExec(pb *openshellv1.Sandbox, cmd *relay.Command, n *execCounts, elapsed time.Duration, code int, end string) {
	words := make([]string, len(cmd.Argv))
	for i, a := range cmd.Argv {
		words[i] = relay.Quote(a)
	}
	fields := map[string]string{
		"argv":         clipField(strings.Join(words, " ")),
		"end":          end,
		"stdin_bytes":  strconv.FormatInt(n.stdin.Load(), 10),
		"stdout_bytes": strconv.FormatInt(n.stdout.Load(), 10),
		"stderr_bytes": strconv.FormatInt(n.stderr.Load(), 10),
		"duration_ms":  strconv.FormatInt(elapsed.Milliseconds(), 10),
	}
	if cmd.Workdir != "" {
		fields["workdir"] = clipField(cmd.Workdir)
	}
	if len(cmd.Env) > 0 {
		keys := make([]string, 0, len(cmd.Env))
		for k := range cmd.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fields["env_keys"] = clipField(strings.Join(keys, ","))
	}
	if cmd.Timeout > 0 {
		fields["timeout_seconds"] = strconv.FormatInt(int64(cmd.Timeout/time.Second), 10)
	}
	level := levelWarn
	if end == "exit" || end == "timeout" {
		fields["exit_code"] = strconv.Itoa(code)
	}
	if end == "exit" {
		level = levelInfo
	}
	s.logs.add(pb.GetMetadata().GetId(), level, "exec", fields)
}

// clipField keeps a field value within logFieldMax bytes, on a rune
// boundary, and says how much was cut.
func clipField(v string) string {
	if len(v) <= logFieldMax {
		return v
	}
	cut := logFieldMax
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return v[:cut] + fmt.Sprintf("...(%d more bytes)", len(v)-cut)
}

// createdFields describes a new sandbox for its "sandbox created" record.
func createdFields(pb *openshellv1.Sandbox) map[string]string {
	f := map[string]string{
		"name":      pb.GetMetadata().GetName(),
		"workspace": pb.GetMetadata().GetWorkspace(),
	}
	if img := pb.GetSpec().GetTemplate().GetImage(); img != "" {
		f["image"] = clipField(img)
	}
	return f
}
