package main

import (
	"context"
	"time"

	"encoding/json"
	"fmt"
	"github.com/ferry-dev/ferry/cmd/ferry/internal/linkemu"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/session/s3store/s3test"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

func TestSessionHelpGolden(t *testing.T) {
	isolate(t)
	for _, sub := range []string{"", "save", "restore", "list", "verify", "prune"} {
		args, name := []string{"session"}, "session"
		if sub != "" {
			args, name = append(args, sub), name+"-"+sub
		}
		t.Run(name, func(t *testing.T) {
			r := runFerry(t, nil, append(args, "--help")...)
			wantOK(t, r)
			golden(t, filepath.Join("help", name+".golden"), r.stdout)
		})
	}
}

// sessionBox is the active gateway with a sandbox "box" whose directory
// sess holds a random tree of seed and opts (src on the host, as made).
func sessionBox(t *testing.T, seed int64, opts transfertest.TreeOptions) (*gatewaytest.Gateway, string, transfertest.Tree) {
	t.Helper()
	g := activeGateway(t)
	wantOK(t, runFerry(t, nil, "sandbox", "create", "box", "-q"))
	src := filepath.Join(g.Root, "box", "sess")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	return g, src, transfertest.RandomTree(t, src, seed, opts)
}

// decode parses one JSON object and checks it has keys.
func decode(t *testing.T, out string, keys ...string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("--json output lacks %q: %s", k, out)
		}
	}
	return m
}

// TestSessionCLI runs save, list, restore, verify and prune through the
// embedded gateway, then verify of a damaged store.
func TestSessionCLI(t *testing.T) {
	for _, mode := range []string{"posix", "auto"} {
		t.Run(mode, func(t *testing.T) { testSessionCLI(t, mode) })
	}
}

func testSessionCLI(t *testing.T, mode string) {
	g, src, tr := sessionBox(t, 9, transfertest.TreeOptions{Entries: 40})
	store := t.TempDir()
	t.Setenv("FERRY_STORE", store)

	r := runFerry(t, nil, "--json", "--mode", mode, "session", "save", "box:sess", "task-1")
	wantOK(t, r)
	m := decode(t, r.stdout, "files", "bytes", "wire_bytes", "new_chunks", "seconds", "snapshot", "key", "mode")
	if m["files"].(float64) != float64(tr.Files) || m["snapshot"].(float64) != 1 {
		t.Errorf("save --json: %s", r.stdout)
	}
	// --store wins over FERRY_STORE.
	other := t.TempDir()
	wantOK(t, runFerry(t, nil, "-q", "--store", other, "--mode", mode, "session", "save", "box:sess", "task-2"))
	if r := runFerry(t, nil, "--json", "--store", other, "session", "list"); r.code != 0 || !strings.Contains(r.stdout, `"task-2"`) || strings.Contains(r.stdout, `"task-1"`) {
		t.Errorf("list of --store: exit %d, %s", r.code, r.stdout)
	}

	r = runFerry(t, nil, "--json", "session", "list", "task-1")
	wantOK(t, r)
	var list []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0]["seq"].(float64) != 1 {
		t.Fatalf("list --json: %s (%v)", r.stdout, err)
	}
	r = runFerry(t, nil, "session", "list")
	wantOK(t, r)
	if !strings.Contains(r.stdout, "NEW BYTES") || !strings.Contains(r.stdout, "task-1") {
		t.Errorf("list: %s", r.stdout)
	}

	r = runFerry(t, nil, "--json", "--mode", mode, "session", "restore", "task-1", "box:restored")
	wantOK(t, r)
	m = decode(t, r.stdout, "files", "bytes", "wire_bytes", "seconds", "snapshot", "mode")
	if m["files"].(float64) != float64(tr.Files) {
		t.Errorf("restore --json: %s", r.stdout)
	}
	transfertest.EqualTrees(t, src, filepath.Join(g.Root, "box", "restored"))
	wantFailure(t, runFerry(t, nil, "--mode", mode, "session", "restore", "task-1", "box:restored"), "not empty", "restored")
	wantOK(t, runFerry(t, nil, "-q", "--mode", mode, "session", "restore", "--replace", "--snapshot", "1", "task-1", "box:restored"))
	wantFailure(t, runFerry(t, nil, "--mode", mode, "session", "restore", "nope", "box:x"), "no such snapshot")
	r = runFerry(t, nil, "--json", "--mode", mode, "session", "restore", "--allow-missing", "nope", "box:x")
	wantOK(t, r)
	if m := decode(t, r.stdout, "missing"); m["missing"] != true {
		t.Errorf("restore --allow-missing: %s", r.stdout)
	}
	wantUsage(t, runFerry(t, nil, "session", "restore", "task-1", "restored"), "SANDBOX:DIR")
	wantUsage(t, runFerry(t, nil, "session", "save", "box:sess", "../bad"), "invalid key")

	r = runFerry(t, nil, "session", "verify")
	if r.code != 0 || !strings.Contains(r.stderr, "ok:") {
		t.Fatalf("verify: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	wantOK(t, runFerry(t, nil, "-q", "--mode", mode, "session", "save", "box:restored", "task-1"))
	r = runFerry(t, nil, "--json", "session", "prune", "--keep", "1")
	wantOK(t, r)
	if m := decode(t, r.stdout, "snapshots", "chunks"); len(m["snapshots"].([]any)) != 1 {
		t.Errorf("prune --keep 1: %s", r.stdout)
	}

	// Damage one chunk: verify names it and the snapshot it breaks.
	chunks, _ := filepath.Glob(filepath.Join(store, "chunks", "*", "*"))
	if len(chunks) == 0 {
		t.Fatal("no chunks in the store")
	}
	if err := os.WriteFile(chunks[0], []byte("damaged"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runFerry(t, nil, "session", "verify", "task-1")
	if r.code != 1 || !strings.Contains(r.stdout, "corrupt chunk "+filepath.Base(chunks[0])) || !strings.Contains(r.stdout, "broken snapshot task-1/2") {
		t.Errorf("verify of a damaged store: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if !strings.HasPrefix(r.stderr, "ferry: ") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("verify stderr %q, want one line", r.stderr)
	}
	wantFailure(t, runFerry(t, nil, "--mode", mode, "session", "restore", "task-1", "box:again"), "corrupt")
	if _, err := os.Lstat(filepath.Join(g.Root, "box", "again")); !os.IsNotExist(err) {
		t.Errorf("restore from a damaged store wrote the target: %v", err)
	}
}

// TestSessionS3CLI: the same save, list, restore and verify with the store
// on a real S3-compatible server (versitygw, started by the test), its
// endpoint from --s3-endpoint and its credentials from the AWS_* variables.
func TestSessionS3CLI(t *testing.T) {
	s3 := s3test.Start(t)
	g, src, tr := sessionBox(t, 11, transfertest.TreeOptions{Entries: 40})
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	t.Setenv("AWS_REGION", s3.Region)
	store := []string{"--store", "s3://" + s3.Bucket + "/ferry", "--s3-endpoint", s3.Endpoint}

	r := runFerry(t, nil, append(store, "--json", "session", "save", "box:sess", "task-1")...)
	wantOK(t, r)
	if m := decode(t, r.stdout, "files", "snapshot", "mode"); m["files"].(float64) != float64(tr.Files) || m["mode"] != "agent" {
		t.Errorf("save --json: %s", r.stdout)
	}
	r = runFerry(t, nil, append(store, "session", "list", "task-1")...)
	wantOK(t, r)
	if !strings.Contains(r.stdout, "task-1") {
		t.Errorf("list: %s", r.stdout)
	}
	wantOK(t, runFerry(t, nil, append(store, "-q", "session", "restore", "task-1", "box:restored")...))
	transfertest.EqualTrees(t, src, filepath.Join(g.Root, "box", "restored"))
	if r := runFerry(t, nil, append(store, "session", "verify")...); r.code != 0 {
		t.Fatalf("verify: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}

	// A lost index object: verify names its pack, --repair-index rewrites
	// it from the pack's trailer, and the store verifies clean again.
	index := s3.Keys(t, s3.Bucket, "ferry/index/")
	if len(index) == 0 {
		t.Fatal("the S3 store holds no index objects: not packed")
	}
	s3.Remove(t, s3.Bucket, index[0])
	name := strings.TrimPrefix(index[0], "ferry/")
	r = runFerry(t, nil, append(store, "session", "verify")...)
	if r.code != 1 || !strings.Contains(r.stdout, "damaged") {
		t.Fatalf("verify without an index object: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runFerry(t, nil, append(store, "session", "verify", "--repair-index")...)
	if r.code != 0 || !strings.Contains(r.stderr, "rewrote "+name) {
		t.Fatalf("verify --repair-index: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := runFerry(t, nil, append(store, "session", "verify")...); r.code != 0 {
		t.Fatalf("verify after the repair: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	wantUsage(t, runFerry(t, nil, "--store", "ftp://x/y", "session", "list"), "s3://BUCKET/PREFIX")
}

// TestSessionRestoreStreamCLI: with --compress zstd an agent-mode restore
// sends the chunks as one zstd stream, whose window spans chunks: a tree
// of one file copied five times (five references to the same chunks)
// crosses in about one copy's bytes, where stored chunks cross five
// times. Both give the saved tree; a damaged chunk fails either, naming
// the damage and writing nothing.
func TestSessionRestoreStreamCLI(t *testing.T) {
	g, src, _ := sessionBox(t, 3, transfertest.TreeOptions{Entries: 5})
	t.Setenv("FERRY_STORE", t.TempDir())
	text := make([]byte, 300<<10)
	rng := rand.New(rand.NewPCG(5, 6))
	const alphabet = "abcdefghijklmnopqrstuvwxyz {}\":,\n"
	for i := range text {
		text[i] = alphabet[rng.IntN(len(alphabet))]
	}
	for i := range 5 {
		writeFile(t, filepath.Join(src, fmt.Sprintf("copy-%d.jsonl", i)), text, 0o644)
	}
	wantOK(t, runFerry(t, nil, "-q", "--mode", "agent", "session", "save", "box:sess", "task-1"))

	wire := map[string]float64{}
	for _, compress := range []string{"none", "zstd"} {
		r := runFerry(t, nil, "--json", "--mode", "agent", "--compress", compress, "session", "restore", "task-1", "box:back-"+compress)
		wantOK(t, r)
		wire[compress] = decode(t, r.stdout, "wire_bytes")["wire_bytes"].(float64)
		transfertest.EqualTrees(t, src, filepath.Join(g.Root, "box", "back-"+compress))
	}
	// Stored: five copies of text at its zstd ratio; the stream: about one.
	t.Logf("wire bytes of %d: stored %.0f, stream %.0f", 5*len(text), wire["none"], wire["zstd"])
	if wire["zstd"] > wire["none"]/3 {
		t.Errorf("wire bytes: stream %.0f, stored %.0f; want the stream under a third", wire["zstd"], wire["none"])
	}

	chunks, _ := filepath.Glob(filepath.Join(os.Getenv("FERRY_STORE"), "chunks", "*", "*"))
	if len(chunks) == 0 {
		t.Fatal("no chunks in the store")
	}
	for _, c := range chunks {
		if err := os.WriteFile(c, []byte("damaged"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, compress := range []string{"none", "zstd"} {
		wantFailure(t, runFerry(t, nil, "--mode", "agent", "--compress", compress, "session", "restore", "task-1", "box:again-"+compress), "corrupt")
		if _, err := os.Lstat(filepath.Join(g.Root, "box", "again-"+compress)); !os.IsNotExist(err) {
			t.Errorf("--compress %s: restore from a damaged store wrote the target: %v", compress, err)
		}
	}
}

// TestSessionRestoreEarlyStreamCLI: through a link of 20 ms each way,
// --compress auto restores as one stream, encoded while the sandbox is
// reached (the -v log says so), and the tree arrives whole, as it does
// on loopback.
func TestSessionRestoreEarlyStreamCLI(t *testing.T) {
	g, src, _ := sessionBox(t, 4, transfertest.TreeOptions{Entries: 5})
	t.Setenv("FERRY_STORE", t.TempDir())
	wantOK(t, runFerry(t, nil, "-q", "--mode", "agent", "session", "save", "box:sess", "task-1"))
	const started = "encoding the chunk stream while the sandbox is reached"

	r := runFerry(t, nil, "-v", "--mode", "agent", "session", "restore", "task-1", "box:fast")
	if r.code != 0 {
		t.Fatalf("restore: exit %d, %s", r.code, r.stderr)
	}
	// Whether a loopback restore streams depends on the machine's load
	// (a slow setup, a slow first call): only the tree is checked.
	transfertest.EqualTrees(t, src, filepath.Join(g.Root, "box", "fast"))

	slow := linkemu.Profile{Name: "slow", Shape: linkemu.Shape{BitsPerSecond: 1e9, Delay: 20 * time.Millisecond}}
	l, err := linkemu.Start(context.Background(), linkemu.ConfigFor(g.Addr, slow))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	// The same gateway, through the link, as the active one.
	storeGateway(t, os.Getenv("XDG_CONFIG_HOME"), "ferry-test", "https://"+l.Addr(), g.CertDir, true)
	r = runFerry(t, nil, "-v", "--mode", "agent", "session", "restore", "task-1", "box:slow")
	if r.code != 0 {
		t.Fatalf("restore over the link: exit %d, %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, started) || strings.Contains(r.stderr, "fast after all") {
		t.Errorf("a restore over a slow link did not stream from the start:\n%s", r.stderr)
	}
	transfertest.EqualTrees(t, src, filepath.Join(g.Root, "box", "slow"))
}
