package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// jsonlFiles is how many session logs the JSONL set splits its bytes into.
const jsonlFiles = 8

// makeJSONLSet writes about size bytes of agent-style JSONL transcripts
// into jsonlFiles files under dir: one JSON object a line, assistant
// turns, tool calls, tool results and user turns, with varied words,
// paths, numbers, timestamps and random ids, the way a coding agent's
// session log looks. It is seeded, so every run writes the same bytes,
// and it compresses like such logs do (a fair part of it, the ids, not
// at all). Each file ends with a whole line.
func makeJSONLSet(b *testing.B, dir string, size int64) *cpSet {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	per := max(size/jsonlFiles, 1)
	for i := range jsonlFiles {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("session-%02d.jsonl", i)))
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriterSize(f, 1<<20)
		g := newJSONLGen(uint64(i))
		var line []byte
		for n := int64(0); n < per; {
			line = g.line(line[:0])
			if n > 0 && n+int64(len(line)) > per {
				break
			}
			if _, err := w.Write(line); err != nil {
				b.Fatal(err)
			}
			n += int64(len(line))
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	return &cpSet{label: sizeLabel(size) + " JSONL", key: "jsonl", dir: dir, want: digestTree(b, dir)}
}

// jsonlWords is the vocabulary of the transcripts' prose.
var jsonlWords = []string{
	"the", "a", "to", "of", "and", "in", "is", "it", "that", "for", "this", "with", "we", "on", "be", "not",
	"I", "will", "can", "should", "now", "then", "first", "next", "let", "me", "check", "look", "at", "file",
	"function", "test", "tests", "error", "errors", "fails", "passes", "build", "run", "fix", "change", "update",
	"add", "remove", "rename", "refactor", "handler", "request", "response", "server", "client", "config",
	"value", "values", "field", "struct", "method", "interface", "package", "module", "import", "return",
	"nil", "pointer", "slice", "map", "channel", "goroutine", "context", "timeout", "deadline", "cancel",
	"read", "write", "close", "open", "path", "directory", "stream", "buffer", "bytes", "length", "offset",
	"index", "loop", "branch", "case", "switch", "default", "panic", "recover", "lock", "mutex", "race",
	"log", "logs", "output", "input", "line", "lines", "column", "schema", "migration", "database", "query",
	"cache", "key", "token", "session", "user", "permission", "denied", "missing", "expected", "got", "want",
	"because", "so", "but", "also", "which", "when", "where", "after", "before", "instead", "again", "still",
	"looks", "like", "seems", "probably", "issue", "problem", "cause", "root", "edge", "corner", "empty",
	"large", "small", "slow", "fast", "memory", "leak", "allocation", "benchmark", "profile", "trace", "span",
	"retry", "backoff", "limit", "quota", "upload", "download", "archive", "compress", "checksum", "digest",
	"version", "release", "commit", "diff", "patch", "merge", "conflict", "rebase", "lint", "vet", "format",
}

var (
	jsonlDirs  = []string{"cmd", "internal", "pkg", "api", "server", "client", "store", "transfer", "relay", "util", "web", "docs"}
	jsonlExts  = []string{".go", ".go", ".go", "_test.go", ".ts", ".py", ".md", ".yaml", ".json", ".proto"}
	jsonlTools = []string{"bash", "read_file", "edit_file", "write_file", "grep", "glob", "list_dir"}
	jsonlCmds  = []string{"go test ./...", "go build ./...", "git status --short", "git diff --stat", "ls -la", "make lint", "npm test", "pytest -q", "cat go.mod", "rg -n"}
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// jsonlGen makes one session's lines.
type jsonlGen struct {
	rng     *rand.Rand
	session string
	step    int
	ms      int64 // the timestamp, ms since the session began
	lastID  []byte
}

func newJSONLGen(seed uint64) *jsonlGen {
	g := &jsonlGen{rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))}
	g.session = string(g.id(nil, 8))
	g.lastID = g.id([]byte("toolu_"), 20)
	return g
}

func (g *jsonlGen) id(dst []byte, n int) []byte {
	for range n {
		dst = append(dst, base62[g.rng.IntN(len(base62))])
	}
	return dst
}

func (g *jsonlGen) word() string { return jsonlWords[g.rng.IntN(len(jsonlWords))] }

// path appends a source path such as internal/cache/lock_test.go.
func (g *jsonlGen) path(dst []byte) []byte {
	dst = append(dst, jsonlDirs[g.rng.IntN(len(jsonlDirs))]...)
	dst = append(dst, '/')
	dst = append(dst, g.word()...)
	dst = append(dst, '/')
	dst = append(dst, g.word()...)
	return append(dst, jsonlExts[g.rng.IntN(len(jsonlExts))]...)
}

// prose appends n words with now and then a path, a number or a stop.
func (g *jsonlGen) prose(dst []byte, n int) []byte {
	for i := range n {
		if i > 0 {
			dst = append(dst, ' ')
		}
		switch k := g.rng.IntN(40); {
		case k == 0:
			dst = g.path(dst)
		case k == 1:
			dst = strconv.AppendInt(dst, int64(g.rng.IntN(5000)), 10)
		case k == 2:
			dst = append(dst, '`')
			dst = append(dst, g.word()...)
			dst = append(dst, "()`"...)
		default:
			dst = append(dst, g.word()...)
		}
		if g.rng.IntN(12) == 0 {
			dst = append(dst, '.')
		} else if g.rng.IntN(20) == 0 {
			dst = append(dst, ',')
		}
	}
	return dst
}

// head appends the fields every line starts with.
func (g *jsonlGen) head(dst []byte, typ string) []byte {
	g.step++
	g.ms += int64(50 + g.rng.IntN(4000))
	t := 1748779200000 + g.ms // 2025-06-01T12:00:00Z
	sec := t / 1000
	dst = append(dst, `{"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, `","session":"`...)
	dst = append(dst, g.session...)
	dst = append(dst, `","step":`...)
	dst = strconv.AppendInt(dst, int64(g.step), 10)
	dst = append(dst, `,"ts":"2025-06-`...)
	dst = fmt.Appendf(dst, "%02dT%02d:%02d:%02d.%03dZ\"", 1+sec/86400%28, sec/3600%24, sec/60%60, sec%60, t%1000)
	return dst
}

// line appends one line, newline included.
func (g *jsonlGen) line(dst []byte) []byte {
	switch k := g.rng.IntN(20); {
	case k < 8:
		dst = g.head(dst, "assistant")
		dst = append(dst, `,"model":"agent-large-2","text":"`...)
		dst = g.prose(dst, 8+g.rng.IntN(120))
		dst = append(dst, `","usage":{"input_tokens":`...)
		dst = strconv.AppendInt(dst, int64(1000+g.rng.IntN(90000)), 10)
		dst = append(dst, `,"output_tokens":`...)
		dst = strconv.AppendInt(dst, int64(10+g.rng.IntN(2000)), 10)
		dst = append(dst, `}}`...)
	case k < 13:
		dst = g.head(dst, "tool_use")
		g.lastID = g.id(append(g.lastID[:0], "toolu_"...), 20)
		tool := jsonlTools[g.rng.IntN(len(jsonlTools))]
		dst = append(dst, `,"tool":{"id":"`...)
		dst = append(dst, g.lastID...)
		dst = append(dst, `","name":"`...)
		dst = append(dst, tool...)
		dst = append(dst, `","input":{`...)
		if tool == "bash" {
			dst = append(dst, `"command":"`...)
			dst = append(dst, jsonlCmds[g.rng.IntN(len(jsonlCmds))]...)
			dst = append(dst, ' ')
			dst = g.path(dst)
			dst = append(dst, `","timeout_ms":120000}}}`...)
		} else {
			dst = append(dst, `"path":"`...)
			dst = g.path(dst)
			dst = append(dst, `","pattern":"`...)
			dst = append(dst, g.word()...)
			dst = append(dst, `"}}}`...)
		}
	case k < 18:
		dst = g.head(dst, "tool_result")
		dst = append(dst, `,"tool_use_id":"`...)
		dst = append(dst, g.lastID...)
		dst = append(dst, `","exit_code":`...)
		dst = strconv.AppendInt(dst, int64(g.rng.IntN(3)/2), 10)
		dst = append(dst, `,"duration_ms":`...)
		dst = strconv.AppendInt(dst, int64(g.rng.IntN(30000)), 10)
		dst = append(dst, `,"output":"`...)
		for i, n := 0, 1+g.rng.IntN(30); i < n; i++ {
			dst = g.path(dst)
			dst = append(dst, ':')
			dst = strconv.AppendInt(dst, int64(1+g.rng.IntN(900)), 10)
			dst = append(dst, ": "...)
			dst = g.prose(dst, 3+g.rng.IntN(12))
			dst = append(dst, `\n`...)
		}
		dst = append(dst, `"}`...)
	default:
		dst = g.head(dst, "user")
		dst = append(dst, `,"text":"`...)
		dst = g.prose(dst, 4+g.rng.IntN(40))
		dst = append(dst, `"}`...)
	}
	return append(dst, '\n')
}
