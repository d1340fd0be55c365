package relaytest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay"
)

// Harness binds the suite to one implementation.
type Harness struct {
	// New returns a ready Execer and the sandbox name to run in.
	New func(t *testing.T) (relay.Execer, string)
	// Cut returns an Execer whose relay breaks once about n bytes of
	// process output have crossed it.
	Cut func(t *testing.T, n int64) (relay.Execer, string)
	// BigSize is the size of the byte-exact stdin→stdout test; 0 means
	// 64 MiB: many windows of every flow control on the way, and the size
	// make bench's transfers, not this suite, are about.
	BigSize int64
	// MaxStdin, when positive, says the implementation takes stdin whole in
	// one message of at most this many bytes (OpenShell's one-shot exec):
	// the suite keeps stdin under it, checks that twice as much is refused
	// with relay.ErrStdinTooLarge, and leaves out the tests that need streamed
	// stdin (no read-ahead, a stdin that never closes).
	MaxStdin int64
	// KilledExit, when non-zero, is the exact exit code the implementation
	// reports for a child killed by SIGKILL; 0 only asks for non-zero.
	KilledExit int
}

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	t.Helper()
	x, box := h.New(t)
	tests := []struct {
		name string
		fn   func(t *testing.T, x relay.Execer, box string, h Harness)
	}{
		{"Echo", testEcho},
		{"AllByteValues", testAllBytes},
		{"EmptyStdin", testEmptyStdin},
		{"NilStdin", testNilStdin},
		{"StdoutStderrApart", testStreamsApart},
		{"ExitCodes", testExitCodes},
		{"KilledChild", testKilled},
		{"ArgvExact", testArgv},
		{"EnvAndWorkdir", testEnvWorkdir},
		{"MultiLineScript", testMultiLine},
		{"InvalidCommand", testInvalid},
		{"NoStdinReadAhead", testNoReadAhead},
		{"StdinReadError", testStdinError},
		{"StdinNotReadAheadOfConsumer", testStdinPaced},
		{"CancelKillsProcessTree", testCancel},
		{"TimeoutExits124", testTimeout},
		{"CancelKillsProcessTree/TTY", testCancelTTY},
		{"TimeoutExits124/TTY", testTimeoutTTY},
		{"Concurrent8", testConcurrent},
		{"BigStream", testBig},
	}
	if h.MaxStdin > 0 {
		tests = append(tests, struct {
			name string
			fn   func(t *testing.T, x relay.Execer, box string, h Harness)
		}{"StdinTooLarge", testTooLarge})
	}
	streamedOnly := map[string]bool{"NoStdinReadAhead": true, "StdinReadError": true, "StdinNotReadAheadOfConsumer": true}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if h.MaxStdin > 0 && streamedOnly[tc.name] {
				t.Skip("one-shot stdin is read whole before the call by design")
			}
			tc.fn(t, x, box, h)
		})
	}
	t.Run("RelayCut", func(t *testing.T) {
		if h.Cut == nil {
			t.Fatal("harness has no Cut: every implementation must show that a cut relay is an error")
		}
		testCut(t, h)
	})
}

type result struct {
	code           int
	err            error
	stdout, stderr []byte
}

func run(ctx context.Context, x relay.Execer, cmd *relay.Command) result {
	var out, errb bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &errb
	}
	code, err := x.Exec(ctx, cmd)
	return result{code: code, err: err, stdout: out.Bytes(), stderr: errb.Bytes()}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func sh(box, script string, args ...string) *relay.Command {
	return &relay.Command{Sandbox: box, Argv: append([]string{"sh", "-c", script, "sh"}, args...)}
}

func testEcho(t *testing.T, x relay.Execer, box string, _ Harness) {
	r := run(ctxFor(t, time.Minute), x, &relay.Command{Sandbox: box, Argv: []string{"echo", "hello", "ferry"}})
	if r.err != nil || r.code != 0 || string(r.stdout) != "hello ferry\n" {
		t.Fatalf("echo: code=%d err=%v stdout=%q stderr=%q", r.code, r.err, r.stdout, r.stderr)
	}
}

func testAllBytes(t *testing.T, x relay.Execer, box string, _ Harness) {
	var in []byte
	for rep := 0; rep < 4; rep++ {
		for b := 0; b < 256; b++ {
			in = append(in, byte(b))
		}
	}
	r := run(ctxFor(t, time.Minute), x, &relay.Command{Sandbox: box, Argv: []string{"cat"}, Stdin: bytes.NewReader(in)})
	if r.err != nil || r.code != 0 || !bytes.Equal(r.stdout, in) {
		t.Fatalf("cat of all byte values: code=%d err=%v got %d bytes, want %d identical", r.code, r.err, len(r.stdout), len(in))
	}
}

func testEmptyStdin(t *testing.T, x relay.Execer, box string, _ Harness) {
	r := run(ctxFor(t, time.Minute), x, &relay.Command{Sandbox: box, Argv: []string{"wc", "-c"}, Stdin: strings.NewReader("")})
	if r.err != nil || r.code != 0 || strings.TrimSpace(string(r.stdout)) != "0" {
		t.Fatalf("wc -c on empty stdin: code=%d err=%v stdout=%q", r.code, r.err, r.stdout)
	}
}

func testNilStdin(t *testing.T, x relay.Execer, box string, _ Harness) {
	r := run(ctxFor(t, time.Minute), x, &relay.Command{Sandbox: box, Argv: []string{"cat"}})
	if r.err != nil || r.code != 0 || len(r.stdout) != 0 {
		t.Fatalf("cat with nil stdin: code=%d err=%v stdout=%q", r.code, r.err, r.stdout)
	}
}

func testStreamsApart(t *testing.T, x relay.Execer, box string, _ Harness) {
	r := run(ctxFor(t, time.Minute), x, sh(box, `i=0; while [ $i -lt 200 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done`))
	if r.err != nil || r.code != 0 {
		t.Fatalf("code=%d err=%v", r.code, r.err)
	}
	var wantOut, wantErr strings.Builder
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&wantOut, "out%d\n", i)
		fmt.Fprintf(&wantErr, "err%d\n", i)
	}
	if string(r.stdout) != wantOut.String() {
		t.Errorf("stdout mixed or short: %q", clip(r.stdout))
	}
	if string(r.stderr) != wantErr.String() {
		t.Errorf("stderr mixed or short: %q", clip(r.stderr))
	}
}

func testExitCodes(t *testing.T, x relay.Execer, box string, _ Harness) {
	for _, want := range []int{0, 1, 42, 255} {
		t.Run(strconv.Itoa(want), func(t *testing.T) {
			r := run(ctxFor(t, time.Minute), x, sh(box, "exit "+strconv.Itoa(want)))
			if r.err != nil || r.code != want {
				t.Fatalf("exit %d: got code=%d err=%v", want, r.code, r.err)
			}
		})
	}
}

func testKilled(t *testing.T, x relay.Execer, box string, h Harness) {
	r := run(ctxFor(t, time.Minute), x, sh(box, `kill -9 $$`))
	if r.err != nil {
		t.Fatalf("killed child: err=%v, want an exit code", r.err)
	}
	if r.code == 0 || (h.KilledExit != 0 && r.code != h.KilledExit) {
		t.Fatalf("killed child: code=%d, want non-zero (exactly %d if set)", r.code, h.KilledExit)
	}
}

func testArgv(t *testing.T, x relay.Execer, box string, _ Harness) {
	args := []string{"", " ", "a b", "'", `"`, `\`, "$(id)", "`id`", "*", "?", "~", "-n", "--", "A=b", "ünïcødé ✓", "tab\there", ";", "&&", "|", "$HOME", "%s"}
	r := run(ctxFor(t, time.Minute), x, &relay.Command{Sandbox: box, Argv: append([]string{"printf", `[%s]\n`}, args...)})
	var want strings.Builder
	for _, a := range args {
		want.WriteString("[" + a + "]\n")
	}
	if r.err != nil || r.code != 0 || string(r.stdout) != want.String() {
		t.Fatalf("argv not passed exactly: code=%d err=%v\n got %q\nwant %q", r.code, r.err, r.stdout, want.String())
	}
	// The program name itself may need quoting.
	r = run(ctxFor(t, time.Minute), x, &relay.Command{Sandbox: box, Argv: []string{"A=b"}})
	if r.err != nil || r.code == 0 {
		t.Fatalf("argv[0] \"A=b\" must be run as a program (and fail), not taken as an assignment: code=%d err=%v", r.code, r.err)
	}
}

func testEnvWorkdir(t *testing.T, x relay.Execer, box string, _ Harness) {
	dir := "ferry-wd-" + token(t)
	r := run(ctxFor(t, time.Minute), x, &relay.Command{Sandbox: box, Argv: []string{"mkdir", "-p", dir + "/sub dir"}})
	if r.err != nil || r.code != 0 {
		t.Fatalf("mkdir: code=%d err=%v stderr=%q", r.code, r.err, r.stderr)
	}
	t.Cleanup(func() {
		run(context.Background(), x, &relay.Command{Sandbox: box, Argv: []string{"rm", "-rf", dir}})
	})
	val := `it's "quoted" $(x) ünï`
	r = run(ctxFor(t, time.Minute), x, &relay.Command{
		Sandbox: box,
		Argv:    []string{"sh", "-c", `printf '%s|%s' "$FERRY_T" "$(basename "$PWD")"`},
		Workdir: dir + "/sub dir",
		Env:     map[string]string{"FERRY_T": val},
	})
	if want := val + "|sub dir"; r.err != nil || r.code != 0 || string(r.stdout) != want {
		t.Fatalf("env/workdir: code=%d err=%v got %q want %q stderr=%q", r.code, r.err, r.stdout, want, r.stderr)
	}
}

// testMultiLine runs an inline script of several lines, which upstream
// accepts (it refuses only NUL in an argument), and the one OPENSHELL_ key
// an exec may set, the Python SDK's exec_python payload.
func testMultiLine(t *testing.T, x relay.Execer, box string, _ Harness) {
	r := run(ctxFor(t, time.Minute), x, &relay.Command{
		Sandbox: box,
		Argv:    []string{"sh", "-c", "echo one\necho two\nprintf '%s' \"$OPENSHELL_PYFUNC_B64\""},
		Env:     map[string]string{"OPENSHELL_PYFUNC_B64": "cGF5bG9hZA=="},
	})
	if r.err != nil || r.code != 0 {
		t.Fatalf("code=%d err=%v stderr=%q", r.code, r.err, r.stderr)
	}
	if want := "one\ntwo\ncGF5bG9hZA=="; string(r.stdout) != want {
		t.Fatalf("stdout=%q, want %q", r.stdout, want)
	}
}

func testInvalid(t *testing.T, x relay.Execer, box string, _ Harness) {
	many := make([]string, relay.MaxArgs+1)
	for i := range many {
		many[i] = "x"
	}
	many[0] = "true"
	longArgs := make([]string, 999)
	for i := range longArgs {
		longArgs[i] = strings.Repeat("y", 300)
	}
	cases := []struct {
		name string
		cmd  relay.Command
	}{
		{"EmptyArgv", relay.Command{}},
		{"1025Args", relay.Command{Argv: many}},
		{"NULInArg", relay.Command{Argv: []string{"echo", "a\x00b"}}},
		{"LongArg", relay.Command{Argv: []string{"echo", strings.Repeat("a", relay.MaxArgLen+1)}}},
		{"BadEnvKey", relay.Command{Argv: []string{"true"}, Env: map[string]string{"1BAD": "x"}}},
		{"ReservedEnvKey", relay.Command{Argv: []string{"true"}, Env: map[string]string{"OPENSHELL_X": "x"}}},
		{"NewlineInEnvValue", relay.Command{Argv: []string{"true"}, Env: map[string]string{"OK": "a\nb"}}},
		{"CRInWorkdir", relay.Command{Argv: []string{"true"}, Workdir: "a\rb"}},
		{"EnvKeyWithEquals", relay.Command{Argv: []string{"true"}, Env: map[string]string{"A=B": "x"}}},
		{"LongEnvValue", relay.Command{Argv: []string{"true"}, Env: map[string]string{"OK": strings.Repeat("v", relay.MaxEnvValueLen+1)}}},
		{"LongWorkdir", relay.Command{Argv: []string{"true"}, Workdir: strings.Repeat("d", relay.MaxWorkdirLen+1)}},
		// Each part within its limit, the assembled shell string not.
		{"LongAssembledCommand", relay.Command{Argv: append([]string{"true"}, longArgs...)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := tc.cmd
			cmd.Sandbox = box
			r := run(ctxFor(t, time.Minute), x, &cmd)
			if !errors.Is(r.err, relay.ErrInvalid) {
				t.Fatalf("got code=%d err=%v, want an error wrapping relay.ErrInvalid", r.code, r.err)
			}
		})
	}
}

// testNoReadAhead is the upstream `sandbox exec` hang: stdin is a pipe that
// never closes and the command never reads it.
func testNoReadAhead(t *testing.T, x relay.Execer, box string, _ Harness) {
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	start := time.Now()
	r := run(ctxFor(t, 30*time.Second), x, &relay.Command{Sandbox: box, Argv: []string{"echo", "done"}, Stdin: pr})
	if r.err != nil || r.code != 0 || string(r.stdout) != "done\n" {
		t.Fatalf("code=%d err=%v stdout=%q", r.code, r.err, r.stdout)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("exec waited %v on a stdin that never closes", d)
	}
}

var errBrokenInput = errors.New("relaytest: broken input")

// failingReader gives n bytes, then fails.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errBrokenInput
	}
	k := min(len(p), f.n)
	clear(p[:k])
	f.n -= k
	return k, nil
}

// testStdinError: a stdin that fails part way must fail the exec; the
// process must not see EOF and report success on half its input.
func testStdinError(t *testing.T, x relay.Execer, box string, _ Harness) {
	// What the process does once its input has ended is left in a file,
	// as a tar's extraction would be: its output may not get back.
	took := `"${TMPDIR:-/tmp}/ferry-took-$1"`
	tok := token(t)
	r := run(ctxFor(t, time.Minute), x, &relay.Command{Sandbox: box, Argv: []string{"sh", "-c", `n=$(wc -c); echo "$n" >` + took, "sh", tok}, Stdin: &failingReader{n: 100 << 10}})
	if !errors.Is(r.err, errBrokenInput) {
		t.Fatalf("stdin failing after 100 KiB: code=%d err=%v stdout=%q, want an error wrapping the read error", r.code, r.err, r.stdout)
	}
	// The process must never see a broken input end as if it were whole:
	// a tar would extract, and its caller place, part of an archive. One
	// that got EOF writes its file at once; give it that long.
	time.Sleep(500 * time.Millisecond)
	if c := run(ctxFor(t, time.Minute), x, &relay.Command{Sandbox: box, Argv: []string{"sh", "-c", `cat ` + took + ` && rm -f ` + took, "sh", tok}}); c.code == 0 {
		t.Fatalf("stdin failing after 100 KiB: the process got EOF and went on, counting %q bytes", bytes.TrimSpace(c.stdout))
	}
}

// countingReader counts what was taken from it.
type countingReader struct {
	mu sync.Mutex
	n  int64
	r  io.Reader
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.mu.Lock()
	c.n += int64(n)
	c.mu.Unlock()
	return n, err
}

func (c *countingReader) count() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// testStdinPaced checks that stdin is read as the process consumes it: a
// process that reads one line and exits must not make Exec swallow a large
// input first.
func testStdinPaced(t *testing.T, x relay.Execer, box string, _ Harness) {
	const total = 1 << 30
	src := &countingReader{r: io.LimitReader(zeros{}, total)}
	r := run(ctxFor(t, time.Minute), x, &relay.Command{Sandbox: box, Argv: []string{"head", "-c", "10"}, Stdin: src})
	if r.err != nil || r.code != 0 || len(r.stdout) != 10 {
		t.Fatalf("head -c 10: code=%d err=%v stdout=%d bytes", r.code, r.err, len(r.stdout))
	}
	// Buffers along the way (pipes, windows, flow control) hold some; a
	// read-ahead to EOF would take the whole GiB.
	if n := src.count(); n > 64<<20 {
		t.Fatalf("read %d bytes of stdin for a process that took 10", n)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func testCancel(t *testing.T, x relay.Execer, box string, h Harness) {
	cancelKills(t, x, box, h, false)
}

// testCancelTTY: on a terminal too, where the process gets no EOF from
// the end of the exec and, on OpenShell, no hangup either.
func testCancelTTY(t *testing.T, x relay.Execer, box string, h Harness) {
	cancelKills(t, x, box, h, true)
}

func cancelKills(t *testing.T, x relay.Execer, box string, h Harness, tty bool) {
	marker := "ferry-" + token(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdin io.Reader
	if h.MaxStdin == 0 {
		pr, pw := io.Pipe()
		t.Cleanup(func() { pw.Close() })
		stdin = pr
	}
	ready := make(chan struct{})
	out := &signalWriter{want: "ready", ch: ready}
	done := make(chan result, 1)
	go func() {
		done <- run(ctx, x, &relay.Command{
			Sandbox: box,
			Argv:    []string{"sh", "-c", "sleep 600 & sleep 600 & echo ready; wait"},
			Env:     map[string]string{"FERRY_MARKER": marker},
			TTY:     tty,
			Stdin:   stdin,
			Stdout:  out,
		})
	}()
	select {
	case <-ready:
	case r := <-done:
		t.Fatalf("command ended before cancel: code=%d err=%v", r.code, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("command never printed ready")
	}
	// Without a marked process the orphan check below would prove nothing.
	WaitMarked(t, marker, 5*time.Second)
	cancel()
	select {
	case r := <-done:
		if r.err == nil || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("after cancel: code=%d err=%v, want context.Canceled", r.code, r.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Exec did not return within 15s of cancel")
	}
	WaitNoMarked(t, marker, 10*time.Second)
}

func testTimeout(t *testing.T, x relay.Execer, box string, _ Harness) {
	timeoutKills(t, x, box, false)
}

func testTimeoutTTY(t *testing.T, x relay.Execer, box string, _ Harness) {
	timeoutKills(t, x, box, true)
}

func timeoutKills(t *testing.T, x relay.Execer, box string, tty bool) {
	marker := "ferry-" + token(t)
	start := time.Now()
	r := run(ctxFor(t, time.Minute), x, &relay.Command{
		Sandbox: box,
		Argv:    []string{"sh", "-c", "sleep 600 & sleep 600; wait"},
		Env:     map[string]string{"FERRY_MARKER": marker},
		Timeout: time.Second,
		TTY:     tty,
	})
	if r.err != nil || r.code != relay.ExitTimeout {
		t.Fatalf("timeout: code=%d err=%v, want exit %d", r.code, r.err, relay.ExitTimeout)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("1s timeout took %v", d)
	}
	WaitNoMarked(t, marker, 10*time.Second)
}

func testConcurrent(t *testing.T, x relay.Execer, box string, h Harness) {
	const n = 8
	size := 1 << 20
	if h.MaxStdin > 0 {
		size = int(h.MaxStdin) - n
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			in := bytes.Repeat([]byte{byte(i)}, size+i)
			r := run(ctxFor(t, 2*time.Minute), x, &relay.Command{Sandbox: box, Argv: []string{"sh", "-c", "cat; exit $0", strconv.Itoa(i)}, Stdin: bytes.NewReader(in)})
			if r.err != nil || r.code != i || !bytes.Equal(r.stdout, in) {
				errs <- fmt.Errorf("exec %d: code=%d err=%v got %d bytes want %d", i, r.code, r.err, len(r.stdout), len(in))
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testBig(t *testing.T, x relay.Execer, box string, h Harness) {
	size := h.BigSize
	if size == 0 {
		size = 64 << 20
	}
	if h.MaxStdin > 0 && size > h.MaxStdin {
		size = h.MaxStdin
	}
	src := io.LimitReader(NewPattern(1), size)
	want := sha256.New()
	got := sha256.New()
	var n countWriter
	r := run(ctxFor(t, 10*time.Minute), x, &relay.Command{
		Sandbox: box,
		Argv:    []string{"cat"},
		Stdin:   io.TeeReader(src, want),
		Stdout:  io.MultiWriter(got, &n),
	})
	if r.err != nil || r.code != 0 {
		t.Fatalf("cat %d bytes: code=%d err=%v stderr=%q", size, r.code, r.err, r.stderr)
	}
	if int64(n) != size || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("cat %d bytes: got %d bytes, digest %x want %x", size, n, got.Sum(nil), want.Sum(nil))
	}
}

func testTooLarge(t *testing.T, x relay.Execer, box string, h Harness) {
	r := run(ctxFor(t, time.Minute), x, &relay.Command{Sandbox: box, Argv: []string{"cat"}, Stdin: io.LimitReader(zeros{}, 2*h.MaxStdin)})
	if !errors.Is(r.err, relay.ErrStdinTooLarge) {
		t.Fatalf("%d bytes of one-shot stdin: code=%d err=%v, want relay.ErrStdinTooLarge", 2*h.MaxStdin, r.code, r.err)
	}
}

func testCut(t *testing.T, h Harness) {
	x, box := h.Cut(t, 1<<20)
	in := int64(16 << 20)
	if h.MaxStdin > 0 {
		// One-shot: the output is what crosses the cut.
		in = h.MaxStdin
	}
	var n countWriter
	r := run(ctxFor(t, 2*time.Minute), x, &relay.Command{
		Sandbox: box,
		Argv:    []string{"cat"},
		Stdin:   io.LimitReader(NewPattern(2), in),
		Stdout:  &n,
	})
	if r.err == nil {
		t.Fatalf("a relay cut after 1 MiB of %d bytes returned success: code=%d, %d bytes", in, r.code, n)
	}
	if !errors.Is(r.err, relay.ErrRelayLost) {
		t.Fatalf("cut relay: err=%v, want one wrapping relay.ErrRelayLost", r.err)
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// signalWriter closes ch the first time want has been written.
type signalWriter struct {
	mu   sync.Mutex
	buf  []byte
	want string
	ch   chan struct{}
	done bool
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if !w.done && bytes.Contains(w.buf, []byte(w.want)) {
		w.done = true
		close(w.ch)
	}
	return len(p), nil
}

func token(t *testing.T) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func clip(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}

// Marked lists the PIDs of processes on this machine whose environment
// holds FERRY_MARKER=marker. Tests use it to prove no process outlives its
// exec; every peer in the suite runs on this machine.
func Marked(marker string) []int { return WithEnv("FERRY_MARKER=" + marker) }

// WithEnv lists the PIDs of the live (not zombie) processes on this
// machine whose environment holds the entry kv ("K=v") exactly.
func WithEnv(kv string) []int {
	var pids []int
	want := []byte(kv)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				if !zombie(e.Name()) {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	return pids
}

func zombie(pid string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

// WaitMarked fails t unless a process carrying marker shows up within d.
// It polls: a process in the middle of an exec briefly has no readable
// environment.
func WaitMarked(t *testing.T, marker string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for len(Marked(marker)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no process carries marker %s after %v", marker, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitNoMarked fails t if processes carrying marker still run after d.
func WaitNoMarked(t *testing.T, marker string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		pids := Marked(marker)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left behind (marker %s): %v", marker, pids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
