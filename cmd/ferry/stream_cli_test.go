package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/cmd/ferry/internal/linkemu"
)

// framed finds the "agent <op> framed" debug line in a -v log and returns
// its block counts by kind.
func framed(t *testing.T, log, op string) map[string]int {
	t.Helper()
	m := regexp.MustCompile(`msg="agent ` + op + ` framed".*stream_blocks=(\d+) zstd_blocks=(\d+) s2_blocks=(\d+) raw_blocks=(\d+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no %q framed line in the log:\n%s", op, log)
	}
	out := map[string]int{}
	for i, k := range []string{"stream", "zstd", "s2", "raw"} {
		out[k], _ = strconv.Atoi(m[i+1])
	}
	return out
}

// agentLog is text that compresses as agent logs do, neither all
// repeated nor random: lines of words drawn at random, with ids.
func agentLog(n int) []byte {
	words := []string{"the", "tool_call", "read_file", "path", "src/main.go", "returns", "content", "tokens", "input", "output", "model", "assistant", "user", "text", "error", "result"}
	r := rand.New(rand.NewPCG(7, 9))
	var b bytes.Buffer
	for b.Len() < n {
		fmt.Fprintf(&b, `{"id":"msg_%016x","type":%q,"text":"`, r.Uint64(), words[r.IntN(len(words))])
		for range 8 + r.IntN(24) {
			b.WriteString(words[r.IntN(len(words))])
			b.WriteByte(' ')
		}
		b.WriteString("\"}\n")
	}
	return b.Bytes()[:n]
}

// TestStreamLinkCLI: through a link with a WAN's round trip (a linkemu
// link of 20 ms each way), Auto sends an agent log up and down as stream
// blocks, which refer across blocks (frame.StreamWindow); on loopback the
// agent, which timed the connection's round trip by its hello, sends
// frames of their own. Both ways the tree arrives exact.
func TestStreamLinkCLI(t *testing.T) {
	g := activeGateway(t)
	wantOK(t, runFerry(t, nil, "sandbox", "create", "box", "-q"))
	local := t.TempDir()
	data := agentLog(6 << 20)
	writeFile(t, filepath.Join(local, "src", "agent.ndjson"), data, 0o644)
	check := func(dir string) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(dir, "agent.ndjson"))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: err %v, equal %v", dir, err, bytes.Equal(got, data))
		}
	}

	r := runFerry(t, nil, "-v", "--mode", "agent", "cp", filepath.Join(local, "src"), "box:lan")
	if r.code != 0 {
		t.Fatalf("cp up: exit %d: %s", r.code, r.stderr)
	}
	check(filepath.Join(g.Root, "box", "lan"))
	// The agent times the round trip by its hello, through the gateway:
	// on a machine loaded by the rest of the suite (-race, 2 cores) that
	// is 10 ms (frame.WANRTT) now and then, and the agent rightly streams.
	// A few tries, of which one must see loopback's round trip.
	var b map[string]int
	for try := range 5 {
		dst := filepath.Join(local, fmt.Sprintf("lan%d", try))
		r = runFerry(t, nil, "-v", "--mode", "agent", "cp", "box:lan", dst)
		if r.code != 0 {
			t.Fatalf("cp down: exit %d: %s", r.code, r.stderr)
		}
		check(dst)
		if b = framed(t, r.stderr, "download"); b["stream"] == 0 {
			break
		}
		t.Logf("download on loopback, try %d, framed %v: the agent's hello took a WAN's round trip", try, b)
	}
	if b["stream"] != 0 || b["zstd"]+b["s2"] == 0 {
		t.Errorf("download on loopback framed %v: want frames of their own, no stream blocks", b)
	}

	slow := linkemu.Profile{Name: "slow", Shape: linkemu.Shape{BitsPerSecond: 1e9, Delay: 20 * time.Millisecond}}
	l, err := linkemu.Start(context.Background(), linkemu.ConfigFor(g.Addr, slow))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	storeGateway(t, os.Getenv("XDG_CONFIG_HOME"), "ferry-test", "https://"+l.Addr(), g.CertDir, true)
	r = runFerry(t, nil, "-v", "--mode", "agent", "cp", filepath.Join(local, "src"), "box:wan")
	if r.code != 0 {
		t.Fatalf("cp up over the link: exit %d: %s", r.code, r.stderr)
	}
	check(filepath.Join(g.Root, "box", "wan"))
	if b := framed(t, r.stderr, "upload"); b["stream"] < 3 || b["stream"] < b["zstd"]+b["s2"] {
		t.Errorf("upload over a 40 ms round trip framed %v: want mostly stream blocks", b)
	}
	r = runFerry(t, nil, "-v", "--mode", "agent", "cp", "box:wan", filepath.Join(local, "wan"))
	if r.code != 0 {
		t.Fatalf("cp down over the link: exit %d: %s", r.code, r.stderr)
	}
	check(filepath.Join(local, "wan"))
	if b := framed(t, r.stderr, "download"); b["stream"] < 3 || b["stream"] < b["zstd"]+b["s2"] {
		t.Errorf("download over a 40 ms round trip framed %v: want mostly stream blocks", b)
	}
}
