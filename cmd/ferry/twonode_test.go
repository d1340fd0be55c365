package main

import (
	"bytes"
	"context"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/s3store"
	"github.com/ferry-dev/ferry/session/s3store/s3test"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// nodeWait bounds one ferry process of TestTwoNodes.
const nodeWait = 2 * time.Minute

// TestTwoNodes is issue 6's shared S3 store across two machines. Each
// "node" is its own ferry processes (this test binary run as ferry, as
// TestSessionCrashKill9 does), its own gateway and sandbox, its own
// OpenShell config and its own chunk cache ($FERRY_CACHE_DIR); both use
// one versitygw, through a loopback proxy that counts the chunk downloads
// and can hold commits. Run 1 of a task on node A writes a transcript into
// its session directory; run 2 on node B resumes it from A's snapshot,
// downloading each chunk once (the cache serves the restore's second read
// of each chunk), and a restore on B again downloads none. Then A and B
// save the key at once, both starting from the same snapshot: exactly one
// commits, the other exits 1 naming the key and the conflict. All of it
// with the server's conditional writes, and again with the lease forced
// (FERRY_S3_COMMIT=lease).
func TestTwoNodes(t *testing.T) {
	xdg := isolate(t)
	s3 := s3test.Start(t)
	proxy := startS3Proxy(t, s3.Endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	t.Setenv("AWS_REGION", s3.Region)
	bundle := filepath.Join(xdg, "bundle.gob")
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(agenttest.Bundle(t)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, bundle, buf.Bytes(), 0o600)
	for _, commit := range []string{"conditional", "lease"} {
		t.Run(commit, func(t *testing.T) { testTwoNodes(t, s3, proxy, bundle, commit) })
	}
}

// twoNodeKey is TestTwoNodes's session key.
const twoNodeKey = "rtzll-rascal-6-0123456789"

func testTwoNodes(t *testing.T, s3 *s3test.Server, proxy *s3Proxy, bundle, commit string) {
	const key = twoNodeKey
	proxy.chunkGets() // what the subtests before downloaded
	prefix := "two-nodes-" + commit
	env := []string{"FERRY_S3_COMMIT=" + commit}
	store := []string{"--store", "s3://" + s3.Bucket + "/" + prefix, "--s3-endpoint", proxy.url}
	a, b := newNode(t, "a", bundle, env, store), newNode(t, "b", bundle, env, store)

	// The store as the test sees it: directly, no cache.
	sb, err := s3store.New(context.Background(), s3store.Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Prefix: prefix,
		Region: s3.Region, AccessKeyID: s3.AccessKey, SecretAccessKey: s3.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	st, err := session.New(session.Config{Backend: sb})
	if err != nil {
		t.Fatal(err)
	}

	// Run 1 on A: the task's first run.
	script := `mkdir -p rascal-meta sess; n=$(cat sess/t.jsonl 2>/dev/null | wc -l); ` +
		`echo "{\"run\":$n,\"node\":\"$NODE\"}" >> sess/t.jsonl; echo "{\"exit_code\":0,\"seen\":$n}" > rascal-meta/meta.json`
	// Some bulk beside the transcript, so that the session has chunks to
	// count.
	bulk := filepath.Join(a.gw.Root, "box", "sess", "bulk")
	if err := os.MkdirAll(bulk, 0o755); err != nil {
		t.Fatal(err)
	}
	transfertest.RandomTree(t, bulk, 21, transfertest.TreeOptions{Entries: 30, BigFiles: 1, BigFileSize: 512 << 10})
	a.wantRun(t, 1, script)
	var packs int // A's, which hold snapshot 1
	sb.List(context.Background(), "packs/", func(session.ObjectInfo) error { packs++; return nil })
	b.wantRun(t, 2, script) // resumes A's snapshot
	m1, err := st.Load(context.Background(), key, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The CLI packs on S3: node B fetches each pack once (the cache serves
	// its second read), and never a chunk alone.
	if got := proxy.chunkGets(); got != packs || packs == 0 || packs > len(chunkIDs(m1)) {
		t.Errorf("run 2 on node B made %d downloads; the store has %d packs (for %d chunks), each to be downloaded once", got, packs, len(chunkIDs(m1)))
	}
	transcript, err := os.ReadFile(filepath.Join(b.gw.Root, "box", "sess", "t.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"run\":0,\"node\":\"a\"}\n{\"run\":1,\"node\":\"b\"}\n"; string(transcript) != want {
		t.Fatalf("node B's transcript after run 2:\n%s\nwant:\n%s", transcript, want)
	}
	transfertest.EqualTrees(t, filepath.Join(a.gw.Root, "box", "sess", "bulk"), filepath.Join(b.gw.Root, "box", "sess", "bulk"))

	// B restores again: its cache has every chunk.
	b.wantOK(t, "-q", "session", "restore", key, "box:again")
	if n := proxy.chunkGets(); n != 0 {
		t.Errorf("a second restore on node B downloaded %d chunks", n)
	}
	transfertest.EqualTrees(t, filepath.Join(b.gw.Root, "box", "sess"), filepath.Join(b.gw.Root, "box", "again"))

	// A and B save at once, from snapshot 2: the proxy holds the first
	// commit request (conditional create, or lease) until both sent one.
	for _, n := range []*node{a, b} {
		writeFile(t, filepath.Join(n.gw.Root, "box", "sess", "t.jsonl"), []byte(`{"run":2,"node":"`+n.name+"\"}\n"), 0o644)
	}
	proxy.holdCommits(2)
	ca := a.start(t, "--json", "session", "save", "box:sess", key)
	cb := b.start(t, "--json", "session", "save", "box:sess", key)
	results := map[*node]nodeResult{a: ca.wait(t), b: cb.wait(t)}
	var winner *node
	for n, r := range results {
		switch {
		case r.code == 0 && winner != nil:
			t.Fatalf("both nodes committed: %+v", results)
		case r.code == 0:
			winner = n
			var saved struct{ Snapshot int64 }
			if err := json.Unmarshal([]byte(r.stdout), &saved); err != nil || saved.Snapshot != 3 {
				t.Errorf("node %s's save --json %q: want snapshot 3 (%v)", n.name, r.stdout, err)
			}
		case r.code != 1 || !strings.Contains(r.stderr, key) || !strings.Contains(r.stderr, "committed concurrently") || !strings.HasPrefix(r.stderr, "ferry: "):
			t.Errorf("node %s lost the race with exit %d, stderr %q; want exit 1 and the conflict on %s", n.name, r.code, r.stderr, key)
		default:
			t.Logf("node %s lost: %s", n.name, strings.TrimSpace(r.stderr))
		}
	}
	if winner == nil {
		t.Fatalf("no node committed: %+v", results)
	}
	list, err := st.List(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("the key has %d snapshots after the race, want 3", len(list))
	}
	dst := filepath.Join(t.TempDir(), "winner")
	if _, err := st.Restore(context.Background(), key, dst, session.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	transfertest.EqualTrees(t, filepath.Join(winner.gw.Root, "box", "sess"), dst)
	if r := a.run(t, "session", "verify"); r.code != 0 {
		t.Errorf("verify: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
}

func chunkIDs(m *session.Manifest) map[session.ID]bool {
	ids := map[session.ID]bool{}
	for _, e := range m.Entries {
		for _, c := range e.Chunks {
			ids[c.ID] = true
		}
	}
	return ids
}

// node is one machine of TestTwoNodes: a gateway with the sandbox "box",
// an OpenShell config naming it, and a chunk cache.
type node struct {
	name   string
	gw     *gatewaytest.Gateway
	env    []string // added to the test's environment
	store  []string // the store's flags
	bundle string
}

func newNode(t *testing.T, name, bundle string, env, store []string) *node {
	t.Helper()
	xdg := t.TempDir()
	gw := startGateway(t, false)
	storeGateway(t, xdg, "node-"+name, "https://"+gw.Addr, gw.CertDir, true)
	n := &node{name: name, gw: gw, bundle: bundle, store: store,
		env: append([]string{"XDG_CONFIG_HOME=" + xdg, "FERRY_CACHE_DIR=" + filepath.Join(t.TempDir(), "cache"), "NODE=" + name}, env...)}
	n.wantOK(t, "-q", "sandbox", "create", "box")
	return n
}

type nodeResult struct {
	code           int
	stdout, stderr string
}

type nodeCmd struct {
	cmd         *exec.Cmd
	cancel      context.CancelFunc
	out, errOut *syncBuffer
}

// start starts `ferry STORE-FLAGS args...` as the node: this test binary,
// made ferry by crashChildEnv (session_crash_test.go), with the node's
// environment.
func (n *node) start(t *testing.T, args ...string) *nodeCmd {
	t.Helper()
	argv, err := json.Marshal(append(append([]string{}, n.store...), args...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), nodeWait)
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(append(os.Environ(), crashChildEnv+"="+string(argv), crashBundleEnv+"="+n.bundle, "HOME="+crashHome), n.env...)
	c := &nodeCmd{cmd: cmd, cancel: cancel, out: &syncBuffer{}, errOut: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = c.out, c.errOut
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	return c
}

func (c *nodeCmd) wait(t *testing.T) nodeResult {
	t.Helper()
	defer c.cancel()
	err := c.cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("ferry %q: %v", c.cmd.Args, err)
	}
	return nodeResult{code: c.cmd.ProcessState.ExitCode(), stdout: c.out.String(), stderr: c.errOut.String()}
}

func (n *node) run(t *testing.T, args ...string) nodeResult {
	t.Helper()
	return n.start(t, args...).wait(t)
}

func (n *node) wantOK(t *testing.T, args ...string) {
	t.Helper()
	if r := n.run(t, args...); r.code != 0 || r.stderr != "" {
		t.Fatalf("node %s: ferry %q: exit %d, stderr %q, stdout %q", n.name, args, r.code, r.stderr, r.stdout)
	}
}

// wantRun runs the task's run number run on the node, with the session
// restored and saved, and checks what the command saw and what was saved.
func (n *node) wantRun(t *testing.T, run int, script string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "run")
	r := n.run(t, "-q", "run", "box", "--session", twoNodeKey+":sess", "-e", "NODE="+n.name, "--out", out, "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("node %s: run %d: exit %d, stderr %q", n.name, run, r.code, r.stderr)
	}
	meta, err := os.ReadFile(filepath.Join(out, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`"seen":%d`, run-1); !strings.Contains(string(meta), want) {
		t.Fatalf("node %s: run %d: meta.json %s, want %s (the transcript of the runs before)", n.name, run, meta, want)
	}
}

// s3Proxy forwards to an S3 server on loopback, counting chunk downloads
// and, when told, holding commit requests (PUTs under snapshots/:
// conditional creates and leases) until enough have arrived. Requests
// keep their Host header, which their signature covers.
type s3Proxy struct {
	url string

	mu    sync.Mutex
	gets  int
	held  int           // commit requests still to wait for
	open  chan struct{} // closed when held reaches 0
	trans *http.Transport
}

func startS3Proxy(t *testing.T, target string) *s3Proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &s3Proxy{trans: &http.Transport{}}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(u); r.Out.Host = r.In.Host },
		Transport: p.trans,
		// A server that refuses a conditional PUT before reading its body
		// breaks the forwarding of that body; the client retries.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && (strings.Contains(r.URL.Path, "/chunks/") || strings.Contains(r.URL.Path, "/packs/")) {
			p.mu.Lock()
			p.gets++
			p.mu.Unlock()
		}
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/snapshots/") {
			p.hold(r.Context())
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); p.trans.CloseIdleConnections() })
	p.url = srv.URL
	return p
}

// chunkGets returns the downloads of chunk data since the last call: of
// loose chunks and of packs.
func (p *s3Proxy) chunkGets() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.gets
	p.gets = 0
	return n
}

// holdCommits makes the next n commit requests wait until all n arrived
// (a minute at most).
func (p *s3Proxy) holdCommits(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held, p.open = n, make(chan struct{})
}

func (p *s3Proxy) hold(ctx context.Context) {
	p.mu.Lock()
	if p.held == 0 {
		p.mu.Unlock()
		return
	}
	if p.held--; p.held == 0 {
		close(p.open)
	}
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
	case <-ctx.Done():
	case <-time.After(time.Minute):
	}
}
