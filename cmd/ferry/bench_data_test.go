package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// jsonlFiles is how many session logs the JSONL set splits its bytes into.
const jsonlFiles = 8

// makeJSONLSet writes about size bytes of coding-agent session logs into
// jsonlFiles files under dir, in the shape of Claude Code's
// `--output-format stream-json`: one JSON object a line, a system init,
// then assistant messages (prose, tool calls with their ids) and user
// messages carrying tool results, each line with the session's id, and a
// result line ending each task. What the tools return is what they return
// in a session on a Go repository: files read with line numbers, grep
// hits, test, build and git output, edits echoed back. The code and the
// prose come from the Go installation's own sources (its files and doc
// comments), so that they compress like real code and real English do,
// neither better nor worse; ids, timings and token counts are random. It
// is seeded: with the same Go installation every run writes the same
// bytes. Each file ends with a whole line.
func makeJSONLSet(b testing.TB, dir string, size int64) *cpSet {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	corpus := loadCorpus(b)
	per := max(size/jsonlFiles, 1)
	for i := range jsonlFiles {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("session-%02d.jsonl", i)))
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriterSize(f, 1<<20)
		g := newJSONLGen(uint64(i), corpus)
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

// corpusFile is one source file a session works on.
type corpusFile struct {
	path  string   // as the agent sees it, under /workspace
	lines []string // the file's lines
}

// corpus is the code and prose the transcripts draw on.
type corpus struct {
	files []corpusFile
	prose []string // doc-comment sentences
}

// corpusDirs are the standard library packages whose sources stand in
// for the repository a session works on.
var corpusDirs = []string{
	"archive/tar", "bufio", "bytes", "context", "encoding/json", "errors", "flag", "fmt",
	"io", "io/fs", "log/slog", "net/http", "net/url", "os", "os/exec", "path/filepath",
	"sort", "strconv", "strings", "sync", "text/template", "time",
}

var (
	corpusOnce sync.Once
	corpusVal  *corpus
	corpusErr  error
)

// loadCorpus reads the Go files of corpusDirs in GOROOT, in a fixed order.
func loadCorpus(b testing.TB) *corpus {
	b.Helper()
	corpusOnce.Do(func() {
		c := &corpus{}
		src := filepath.Join(runtime.GOROOT(), "src")
		for _, d := range corpusDirs {
			err := filepath.WalkDir(filepath.Join(src, d), func(p string, e fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if e.IsDir() {
					if p != filepath.Join(src, d) {
						return filepath.SkipDir
					}
					return nil
				}
				if !strings.HasSuffix(p, ".go") {
					return nil
				}
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(src, p)
				lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
				c.files = append(c.files, corpusFile{path: "/workspace/" + filepath.ToSlash(rel), lines: lines})
				var sentence []string
				for _, l := range lines {
					t := strings.TrimSpace(l)
					if !strings.HasPrefix(t, "// ") {
						if len(sentence) > 0 {
							c.prose = append(c.prose, strings.Join(sentence, " "))
							sentence = nil
						}
						continue
					}
					sentence = append(sentence, strings.TrimPrefix(t, "// "))
				}
				return nil
			})
			if err != nil {
				corpusErr = err
				return
			}
		}
		if len(c.files) == 0 || len(c.prose) == 0 {
			corpusErr = fmt.Errorf("no Go sources under %s", src)
			return
		}
		corpusVal = c
	})
	if corpusErr != nil {
		b.Fatalf("load the JSONL corpus: %v", corpusErr)
	}
	return corpusVal
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// jsonlGen makes one session's lines.
type jsonlGen struct {
	rng     *rand.Rand
	c       *corpus
	session string
	model   string
	started bool
	turns   int
	work    []int  // indexes of the files this task works on
	pending []byte // the tool_result line that answers the last tool call
	enc     *json.Encoder
	buf     bytes.Buffer
}

func newJSONLGen(seed uint64, c *corpus) *jsonlGen {
	g := &jsonlGen{rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), c: c, model: "claude-sonnet-4-5-20250929"}
	g.session = g.uuid()
	g.enc = json.NewEncoder(&g.buf)
	g.enc.SetEscapeHTML(false) // as JSON.stringify writes it
	return g
}

func (g *jsonlGen) uuid() string {
	const hex = "0123456789abcdef"
	var b []byte
	for i := range 32 {
		if i == 8 || i == 12 || i == 16 || i == 20 {
			b = append(b, '-')
		}
		b = append(b, hex[g.rng.IntN(16)])
	}
	return string(b)
}

func (g *jsonlGen) id(prefix string) string {
	b := []byte(prefix)
	for range 22 {
		b = append(b, base62[g.rng.IntN(len(base62))])
	}
	return string(b)
}

// str appends s as a JSON string.
func (g *jsonlGen) str(dst []byte, s string) []byte {
	g.buf.Reset()
	g.enc.Encode(s)
	return append(dst, bytes.TrimSuffix(g.buf.Bytes(), []byte("\n"))...)
}

func (g *jsonlGen) file() *corpusFile {
	if len(g.work) == 0 || g.rng.IntN(6) == 0 {
		g.work = append(g.work, g.rng.IntN(len(g.c.files)))
		if len(g.work) > 5 {
			g.work = g.work[1:]
		}
	}
	return &g.c.files[g.work[g.rng.IntN(len(g.work))]]
}

// prose is n sentences of doc-comment English.
func (g *jsonlGen) prose(n int) string {
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			sb.WriteString(" ")
		}
		sb.WriteString(g.c.prose[g.rng.IntN(len(g.c.prose))])
	}
	return sb.String()
}

// numbered is lines [from, to) of f as the Read tool shows them.
func numbered(f *corpusFile, from, to int) string {
	var sb strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&sb, "%6d→%s\n", i+1, f.lines[i])
	}
	return sb.String()
}

func (g *jsonlGen) usage(dst []byte) []byte {
	return fmt.Appendf(dst, `"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":%d,"service_tier":"standard"}`,
		1+g.rng.IntN(8), g.rng.IntN(6000), 10000+g.rng.IntN(150000), 1+g.rng.IntN(900))
}

// assistant appends an assistant message holding one content block.
func (g *jsonlGen) assistant(dst []byte, content []byte) []byte {
	dst = append(dst, `{"type":"assistant","message":{"id":"`...)
	dst = append(dst, g.id("msg_01")...)
	dst = append(dst, `","type":"message","role":"assistant","model":"`...)
	dst = append(dst, g.model...)
	dst = append(dst, `","content":[`...)
	dst = append(dst, content...)
	dst = append(dst, `],"stop_reason":null,"stop_sequence":null,`...)
	dst = g.usage(dst)
	dst = append(dst, `},"parent_tool_use_id":null,"session_id":"`...)
	dst = append(dst, g.session...)
	return append(dst, "\"}\n"...)
}

// toolUse appends an assistant tool call and queues its result.
func (g *jsonlGen) toolUse(dst []byte) []byte {
	id := g.id("toolu_01")
	f := g.file()
	var input, result []byte
	switch k := g.rng.IntN(10); {
	case k < 4: // Read
		from, to := 0, min(len(f.lines), 2000)
		if len(f.lines) > 400 && g.rng.IntN(2) == 0 {
			from = g.rng.IntN(len(f.lines) - 200)
			to = min(len(f.lines), from+50+g.rng.IntN(250))
			input = fmt.Appendf(nil, `{"file_path":%s,"offset":%d,"limit":%d}`, g.str(nil, f.path), from+1, to-from)
		} else {
			input = fmt.Appendf(nil, `{"file_path":%s}`, g.str(nil, f.path))
		}
		result = g.str(nil, numbered(f, from, to))
	case k < 6: // Grep
		words := strings.Fields(f.lines[g.rng.IntN(len(f.lines))])
		pat := "func"
		if len(words) > 0 {
			pat = strings.Trim(words[g.rng.IntN(len(words))], "(){}*&,;.\"")
		}
		if pat == "" {
			pat = "err"
		}
		input = fmt.Appendf(nil, `{"pattern":%s,"path":"/workspace","output_mode":"content","-n":true}`, g.str(nil, pat))
		var sb strings.Builder
		for n := 0; n < 40 && sb.Len() < 20000; n++ {
			h := &g.c.files[(g.work[0]+n)%len(g.c.files)]
			for i, l := range h.lines {
				if strings.Contains(l, pat) && sb.Len() < 20000 {
					fmt.Fprintf(&sb, "%s:%d:%s\n", h.path, i+1, l)
				}
			}
		}
		result = g.str(nil, sb.String())
	case k < 8: // Bash
		cmd, out := g.command(f)
		input = fmt.Appendf(nil, `{"command":%s,"description":%s}`, g.str(nil, cmd), g.str(nil, g.prose(1)))
		result = g.str(nil, out)
	default: // Edit
		at := g.rng.IntN(max(1, len(f.lines)-12))
		end := min(len(f.lines), at+1+g.rng.IntN(8))
		old := strings.Join(f.lines[at:end], "\n")
		repl := strings.ReplaceAll(old, "err", "err2")
		input = fmt.Appendf(nil, `{"file_path":%s,"old_string":%s,"new_string":%s}`, g.str(nil, f.path), g.str(nil, old), g.str(nil, repl))
		lo, hi := max(0, at-5), min(len(f.lines), end+5)
		result = g.str(nil, "The file "+f.path+" has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n"+numbered(f, lo, hi))
	}
	name := "Read"
	switch {
	case bytes.Contains(input, []byte(`"pattern"`)):
		name = "Grep"
	case bytes.Contains(input, []byte(`"command"`)):
		name = "Bash"
	case bytes.Contains(input, []byte(`"old_string"`)):
		name = "Edit"
	}
	content := fmt.Appendf(nil, `{"type":"tool_use","id":"%s","name":"%s","input":%s}`, id, name, input)
	dst = g.assistant(dst, content)
	g.pending = append(g.pending[:0], `{"type":"user","message":{"role":"user","content":[{"tool_use_id":"`...)
	g.pending = append(g.pending, id...)
	g.pending = append(g.pending, `","type":"tool_result","content":`...)
	g.pending = append(g.pending, result...)
	g.pending = append(g.pending, `}]},"parent_tool_use_id":null,"session_id":"`...)
	g.pending = append(g.pending, g.session...)
	g.pending = append(g.pending, "\"}\n"...)
	return dst
}

// command is a shell command on f's package and what it prints.
func (g *jsonlGen) command(f *corpusFile) (string, string) {
	pkg := strings.TrimPrefix(filepath.Dir(f.path), "/workspace/")
	var sb strings.Builder
	switch g.rng.IntN(4) {
	case 0:
		for range 1 + g.rng.IntN(12) {
			h := &g.c.files[g.rng.IntN(len(g.c.files))]
			fmt.Fprintf(&sb, "ok  \t%s\t%d.%03ds\n", strings.TrimPrefix(filepath.Dir(h.path), "/workspace/"), g.rng.IntN(9), g.rng.IntN(1000))
		}
		return "go test ./...", sb.String()
	case 1:
		fmt.Fprintf(&sb, "--- FAIL: Test%s (0.%02ds)\n", strings.ToUpper(filepath.Base(pkg)[:1])+filepath.Base(pkg)[1:], g.rng.IntN(100))
		for range 1 + g.rng.IntN(6) {
			i := g.rng.IntN(len(f.lines))
			fmt.Fprintf(&sb, "    %s:%d: %s\n", filepath.Base(f.path), i+1, strings.TrimSpace(f.lines[i]))
		}
		fmt.Fprintf(&sb, "FAIL\nFAIL\t%s\t0.%03ds\nFAIL\n", pkg, g.rng.IntN(1000))
		return "go test ./" + pkg + "/...", sb.String()
	case 2:
		at := g.rng.IntN(max(1, len(f.lines)-20))
		fmt.Fprintf(&sb, "diff --git a/%s b/%s\nindex 3f2a1c4..8b9d0e7 100644\n--- a/%s\n+++ b/%s\n@@ -%d,14 +%d,14 @@\n", pkg, pkg, f.path, f.path, at+1, at+1)
		for i := at; i < min(len(f.lines), at+14); i++ {
			if i == at+6 {
				fmt.Fprintf(&sb, "-%s\n+%s // changed\n", f.lines[i], f.lines[i])
				continue
			}
			fmt.Fprintf(&sb, " %s\n", f.lines[i])
		}
		return "git diff", sb.String()
	default:
		fmt.Fprintf(&sb, "total %d\n", 8*len(g.c.files))
		for n := range 10 + g.rng.IntN(30) {
			h := &g.c.files[(g.work[0]+n)%len(g.c.files)]
			fmt.Fprintf(&sb, "-rw-r--r--  1 agent agent %7d Jun  1 12:%02d %s\n", 40*len(h.lines), g.rng.IntN(60), filepath.Base(h.path))
		}
		return "ls -la " + pkg, sb.String()
	}
}

// line appends one line, newline included.
func (g *jsonlGen) line(dst []byte) []byte {
	if !g.started {
		g.started = true
		dst = append(dst, `{"type":"system","subtype":"init","cwd":"/workspace","session_id":"`...)
		dst = append(dst, g.session...)
		dst = append(dst, `","tools":["Task","Bash","Glob","Grep","Read","Edit","Write","WebFetch","TodoWrite"],"mcp_servers":[],"model":"`...)
		dst = append(dst, g.model...)
		return append(dst, `","permissionMode":"bypassPermissions","apiKeySource":"none"}`+"\n"...)
	}
	if len(g.pending) > 0 {
		dst = append(dst, g.pending...)
		g.pending = g.pending[:0]
		return dst
	}
	g.turns++
	switch k := g.rng.IntN(20); {
	case k < 5:
		return g.assistant(dst, fmt.Appendf(nil, `{"type":"text","text":%s}`, g.str(nil, g.prose(1+g.rng.IntN(5)))))
	case k < 19:
		return g.toolUse(dst)
	default:
		dst = fmt.Appendf(dst, `{"type":"result","subtype":"success","is_error":false,"duration_ms":%d,"duration_api_ms":%d,"num_turns":%d,"result":%s,"session_id":"%s","total_cost_usd":%.6f,`,
			1000+g.rng.IntN(600000), 1000+g.rng.IntN(500000), g.turns, g.str(nil, g.prose(2+g.rng.IntN(6))), g.session, g.rng.Float64()*3)
		dst = g.usage(dst)
		g.turns = 0
		g.work = slices.Delete(g.work, 0, len(g.work))
		return append(dst, "}\n"...)
	}
}
