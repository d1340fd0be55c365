package gateway

import (
	"bytes"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
)

func testBook(t *testing.T, dir string) *logBook {
	t.Helper()
	b, err := newLogBook(dir, slog.New(slog.DiscardHandler), func(id string) bool { return id == "sb" })
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLogBookBounds: a ring keeps its newest logTailLines records within
// logMaxBytes, its file never holds more than twice that, and a new book
// on the same directory starts from the file's newest records.
func TestLogBookBounds(t *testing.T) {
	dir := t.TempDir()
	b := testBook(t, dir)
	const total = 2*logTailLines + 7
	for i := range total {
		b.add("sb", levelInfo, "exec", map[string]string{"i": strconv.Itoa(i)})
		if fi, err := os.Stat(b.path("sb")); err != nil || fi.Size() > 2*logMaxBytes {
			t.Fatalf("after %d records: file %v, %v", i+1, fi, err)
		}
	}
	lines, _, next, _ := b.tail("sb", 1<<30)
	if len(lines) != logTailLines || next != total || lines[0].GetFields()["i"] != strconv.Itoa(total-logTailLines) {
		t.Fatalf("tail: %d lines from %s, next %d; want the newest %d of %d", len(lines), lines[0].GetFields()["i"], next, logTailLines, total)
	}
	raw, err := os.ReadFile(b.path("sb"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(raw, []byte("\n")); n > 2*logTailLines || n < logTailLines {
		t.Errorf("file holds %d lines, want between %d and %d", n, logTailLines, 2*logTailLines)
	}
	again, _, _, _ := testBook(t, dir).tail("sb", 1<<30)
	if len(again) != logTailLines || again[len(again)-1].GetFields()["i"] != strconv.Itoa(total-1) || again[0].GetFields()["i"] != lines[0].GetFields()["i"] {
		t.Errorf("reloaded %d lines, %v..%v; want the same %d", len(again), again[0].GetFields(), again[len(again)-1].GetFields(), logTailLines)
	}

	// Big records are bounded by bytes, not lines.
	big := testBook(t, t.TempDir())
	for range logMaxBytes/logFieldMax + 100 {
		big.add("sb", levelInfo, "exec", map[string]string{"argv": clipField(strings.Repeat("a", 1<<20))})
	}
	lines, r, _, _ := big.tail("sb", 1<<30)
	if r.bytes > logMaxBytes || len(lines) >= logTailLines || len(lines) == 0 {
		t.Errorf("%d big lines, %d bytes; want fewer than %d lines within %d bytes", len(lines), r.bytes, logTailLines, logMaxBytes)
	}

	// Unknown sandboxes get no ring and no file.
	b.add("other", levelInfo, "exec", nil)
	if l, r, _, _ := b.tail("other", 10); r != nil || l != nil {
		t.Errorf("an unknown sandbox has records %v", l)
	}
	if _, err := os.Stat(b.path("other")); !os.IsNotExist(err) {
		t.Errorf("an unknown sandbox has a file: %v", err)
	}
}

// TestLogBookSkipsForeignLines: lines that are too long, not records, or
// another sandbox's are skipped on load.
func TestLogBookSkipsForeignLines(t *testing.T) {
	dir := t.TempDir()
	b := testBook(t, dir)
	content := strings.Join([]string{
		`{"sandboxId":"sb","message":"one"}`,
		"not json",
		`{"sandboxId":"other","message":"foreign"}`,
		`{"sandboxId":"sb","message":"` + strings.Repeat("x", logLineMax) + `"}`,
		`{"sandboxId":"sb","message":"two"}`,
	}, "\n") + "\n"
	if err := os.WriteFile(b.path("sb"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	lines, _, _, _ := b.tail("sb", 100)
	var got []string
	for _, l := range lines {
		got = append(got, l.GetMessage())
	}
	if strings.Join(got, ",") != "one,two" {
		t.Errorf("loaded %q, want one,two", got)
	}
}

func TestClipField(t *testing.T) {
	if got := clipField("short"); got != "short" {
		t.Errorf("clipField(short) = %q", got)
	}
	long := strings.Repeat("é", logFieldMax) // two bytes each
	got := clipField(long)
	if !utf8.ValidString(got) || len(got) > logFieldMax+32 || !strings.HasSuffix(got, "...("+strconv.Itoa(len(long)-logFieldMax)+" more bytes)") {
		t.Errorf("clipField of %d bytes: %d bytes ending %q", len(long), len(got), got[len(got)-40:])
	}
}

func TestLogFilter(t *testing.T) {
	line := func(level, source string, ts int64) *openshellv1.SandboxLogLine {
		return &openshellv1.SandboxLogLine{Level: level, Source: source, TimestampMs: ts}
	}
	for _, tc := range []struct {
		f    logFilter
		l    *openshellv1.SandboxLogLine
		want bool
	}{
		{logFilter{}, line("", "", 0), true},
		{logFilter{sinceMs: 10}, line("INFO", "", 9), false},
		{logFilter{sinceMs: 10}, line("INFO", "", 10), true},
		{logFilter{sources: []string{"gateway"}}, line("INFO", "", 1), true},
		{logFilter{sources: []string{"sandbox"}}, line("INFO", "", 1), false},
		{logFilter{sources: []string{"sandbox"}}, line("INFO", "sandbox", 1), true},
		{logFilter{minLevel: "warn"}, line("ERROR", "", 1), true},
		{logFilter{minLevel: "warn"}, line("WARN", "", 1), true},
		{logFilter{minLevel: "warn"}, line("INFO", "", 1), false},
		{logFilter{minLevel: "info"}, line("OCSF", "", 1), true},
		{logFilter{minLevel: "debug"}, line("TRACE", "", 1), false},
		{logFilter{minLevel: "debug"}, line("odd", "", 1), false},
		{logFilter{minLevel: "odd"}, line("odd", "", 1), true},
	} {
		if got := tc.f.match(tc.l); got != tc.want {
			t.Errorf("%+v matches %v: %v, want %v", tc.f, tc.l, got, tc.want)
		}
	}
}
