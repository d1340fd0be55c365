package ferry

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/ferry-dev/ferry/relay/openshell"
)

// AuditFile is the name of the audit artifact in a pull's output directory.
const AuditFile = "openshell-audit.log"

// LogSource gives a sandbox's gateway log records, oldest first.
// *openshell.Client is one (GetSandboxLogs); a direct SSH channel has no
// gateway and so no log.
type LogSource interface {
	SandboxLogs(ctx context.Context, sandbox string) ([]openshell.LogLine, error)
}

// AuditResult says where the audit artifact went and how many records it
// holds, in the shape `ferry pull --audit --json` adds to its output.
type AuditResult struct {
	Path  string `json:"audit"`
	Lines int    `json:"audit_lines"`
}

// PullAudit writes the gateway's log records for the sandbox into
// out/openshell-audit.log, one line per record (see FormatLogLine),
// replacing any previous file atomically (temp file and rename) with mode
// 0600. A gateway that keeps no records for the sandbox gives an empty
// file, reported as zero lines.
//
// The records are what the gateway chose to log: ferry's embedded gateway
// logs each exec's argv, workdir, environment keys, exit code and byte
// counts, never stdin or environment values, and ferry never puts a
// secret in argv or the environment, so a log of ferry's own traffic holds
// no secret. The gateway is still untrusted input: every field is escaped
// so that a record is exactly one line.
func PullAudit(ctx context.Context, src LogSource, sandbox, out string) (AuditResult, error) {
	if src == nil {
		return AuditResult{}, errors.New("pull audit: no log source (the sandbox must be reached through a gateway)")
	}
	lines, err := src.SandboxLogs(ctx, sandbox)
	if err != nil {
		return AuditResult{}, fmt.Errorf("pull audit of %s: %w", sandbox, err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return AuditResult{}, fmt.Errorf("create %s: %w", out, err)
	}
	path := filepath.Join(out, AuditFile)
	if err := writeAtomic(path, func(w *bufio.Writer) error {
		for _, l := range lines {
			if err := ctx.Err(); err != nil {
				return err
			}
			w.WriteString(FormatLogLine(l))
			w.WriteByte('\n')
		}
		return nil
	}); err != nil {
		return AuditResult{}, fmt.Errorf("write %s: %w", path, err)
	}
	return AuditResult{Path: path, Lines: len(lines)}, nil
}

// writeAtomic writes path through a temp file beside it (mode 0600),
// synced and renamed into place only when complete.
func writeAtomic(path string, fill func(*bufio.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), ".ferry-audit-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := fill(w); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// FormatLogLine renders one gateway log record as one line:
//
//	2026-11-30T18:06:41.123Z INFO gateway exec argv="sh -c 'exit 3'" end=exit exit_code=3
//
// that is the time (RFC 3339, UTC, as precise as the record), the level,
// the source (upstream's default "gateway" when empty), the message, and
// the fields as key=value sorted by key. A level, source, key or value
// that holds a space, and any part that is empty or holds a quote, '=', a
// backslash or a character that is not printable, is written as a
// Go-quoted string, so that a line always splits back into its parts: the
// message runs up to the first key=value.
func FormatLogLine(l openshell.LogLine) string {
	var b strings.Builder
	b.WriteString(l.Time.UTC().Format(time.RFC3339Nano))
	b.WriteByte(' ')
	b.WriteString(logWord(l.Level, "-", false))
	b.WriteByte(' ')
	b.WriteString(logWord(l.Source, "gateway", false))
	b.WriteByte(' ')
	b.WriteString(logWord(l.Message, `""`, true))
	keys := make([]string, 0, len(l.Fields))
	for k := range l.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteByte(' ')
		b.WriteString(logWord(k, `""`, false))
		b.WriteByte('=')
		b.WriteString(logWord(l.Fields[k], `""`, false))
	}
	return b.String()
}

// logWord is s as an unambiguous part of a log line, empty if s is
// empty; with spaces, s may hold spaces unquoted (a message, which ends
// where the first key=value begins).
func logWord(s, empty string, spaces bool) string {
	if s == "" {
		return empty
	}
	if strings.HasPrefix(s, " ") || strings.HasSuffix(s, " ") || strings.IndexFunc(s, func(r rune) bool {
		return (r == ' ' && !spaces) || r == '"' || r == '=' || r == '\\' || !unicode.IsPrint(r)
	}) >= 0 {
		return strconv.Quote(s)
	}
	return s
}
