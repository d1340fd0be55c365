package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/session/s3store/s3test"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// gatewayProc is `ferry gateway serve --plaintext` as a process of its
// own (this test binary made ferry by crashChildEnv), so that a test can
// kill it as a crash would.
type gatewayProc struct {
	cmd  *exec.Cmd
	addr string
	root string
	once sync.Once
}

var listeningPlainRE = regexp.MustCompile(`listening on (127\.0\.0\.1:[0-9]+) \(plaintext\)\n`)

// startGatewayProc starts the gateway on root, killed when t ends.
func startGatewayProc(t *testing.T, root string) *gatewayProc {
	t.Helper()
	argv, err := json.Marshal([]string{"gateway", "serve", "--listen", "127.0.0.1:0", "--root", root, "--plaintext"})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), crashChildEnv+"="+string(argv), "HOME="+crashHome, "TMPDIR="+t.TempDir())
	var errb syncBuffer
	cmd.Stderr = &errb
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gatewayProc{cmd: cmd, root: root}
	t.Cleanup(g.kill)
	for i := 0; i < 1000 && g.addr == ""; i++ {
		if m := listeningPlainRE.FindStringSubmatch(errb.String()); m != nil {
			g.addr = m[1]
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if g.addr == "" {
		t.Fatalf("gateway process did not listen within 10s: %s", errb.String())
	}
	return g
}

// kill SIGKILLs the gateway process and waits for it, once.
func (g *gatewayProc) kill() {
	g.once.Do(func() {
		g.cmd.Process.Kill()
		g.cmd.Wait()
	})
}

// commitProxy forwards to an S3 server on loopback and, once armed, calls
// its hook when a commit (the conditional PUT of a manifest,
// snapshots/KEY/SEQ) has succeeded, before the client hears of it.
// Requests keep their Host header, which their signature covers.
type commitProxy struct {
	url   string
	mu    sync.Mutex
	hook  func()
	fired int
}

var manifestPath = regexp.MustCompile(`/snapshots/[^/]+/[0-9]+$`)

func startCommitProxy(t *testing.T, target string) *commitProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &commitProxy{}
	trans := &http.Transport{}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(u); r.Out.Host = r.In.Host },
		Transport: trans,
		ModifyResponse: func(resp *http.Response) error {
			r := resp.Request
			if r.Method == http.MethodPut && manifestPath.MatchString(r.URL.Path) && resp.StatusCode/100 == 2 {
				p.mu.Lock()
				hook := p.hook
				p.hook = nil
				if hook != nil {
					p.fired++
				}
				p.mu.Unlock()
				if hook != nil {
					hook()
				}
			}
			return nil
		},
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(func() { srv.Close(); trans.CloseIdleConnections() })
	p.url = srv.URL
	return p
}

// arm makes the next commit call hook; it returns how many hooks have
// fired so far.
func (p *commitProxy) arm(hook func()) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hook = hook
	return p.fired
}

func (p *commitProxy) firedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fired
}

// TestSessionRelayLostAfterCommitCLI is issue 20's gateway killed just
// after an S3 commit: the gateway is a process of its own, SIGKILLed
// when versitygw has accepted the manifest, before ferry hears of the
// commit; ferry's agent exec is still open then (its exit status is read
// after the commit). `session save` (with and without --json) and `run
// --session` exit 0, say "committed snapshot N of KEY, then lost the
// relay", and --json carries relay_lost; each snapshot restores
// byte-identical through another gateway afterwards.
func TestSessionRelayLostAfterCommitCLI(t *testing.T) {
	isolate(t)
	s3 := s3test.Start(t)
	proxy := startCommitProxy(t, s3.Endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	t.Setenv("AWS_REGION", s3.Region)
	const key = "lost-relay-key"
	store := []string{"--store", "s3://" + s3.Bucket + "/relay-lost", "--s3-endpoint", proxy.url}
	lost := regexp.MustCompile(`(?m)^ferry: committed snapshot ([0-9]+) of ` + key + `, then lost the relay: .*relay lost.*$`)

	// saved[seq] is the sandbox directory snapshot seq was saved from.
	saved := map[int64]string{}
	for i, tc := range []struct {
		name string
		args []string // after the store's flags and --gateway
		json func(t *testing.T, out string) (seq int64, relayLost string)
	}{
		{"save --json", []string{"--json", "session", "save", "box:sess", key}, func(t *testing.T, out string) (int64, string) {
			var res struct {
				Snapshot  int64  `json:"snapshot"`
				RelayLost string `json:"relay_lost"`
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("save --json %q: %v", out, err)
			}
			return res.Snapshot, res.RelayLost
		}},
		{"save", []string{"session", "save", "box:sess", key}, nil},
		{"run --session", []string{"--json", "run", "box", "--session", key + ":sess", "--out", "OUT", "--",
			"sh", "-c", `mkdir -p rascal-meta; echo run >> sess/t.jsonl; echo '{"exit_code":0}' > rascal-meta/meta.json`},
			func(t *testing.T, out string) (int64, string) {
				var res struct {
					ExitCode int `json:"exit_code"`
					Sessions []struct {
						Saved *struct {
							Snapshot  int64  `json:"snapshot"`
							RelayLost string `json:"relay_lost"`
						} `json:"saved"`
						Error string `json:"error"`
					} `json:"sessions"`
				}
				// The command's own output comes first.
				if err := json.Unmarshal([]byte(out[strings.LastIndex(out, "\n{")+1:]), &res); err != nil {
					t.Fatalf("run --json %q: %v", out, err)
				}
				if res.ExitCode != 0 || len(res.Sessions) != 1 || res.Sessions[0].Saved == nil || res.Sessions[0].Error != "" {
					t.Fatalf("run --json: %s", out)
				}
				return res.Sessions[0].Saved.Snapshot, res.Sessions[0].Saved.RelayLost
			}},
	} {
		root := t.TempDir() // outlives the subtest, for the restores below
		t.Run(tc.name, func(t *testing.T) {
			g := startGatewayProc(t, root)
			gw := []string{"--gateway", "http://" + g.addr}
			wantOK(t, runFerry(t, nil, append(gw, "-q", "sandbox", "create", "box")...))
			src := filepath.Join(g.root, "box", "sess")
			if err := os.MkdirAll(src, 0o755); err != nil {
				t.Fatal(err)
			}
			transfertest.RandomTree(t, src, int64(30+i), transfertest.TreeOptions{Entries: 30})
			args := append(append(append([]string{}, store...), gw...), tc.args...)
			for j, a := range args {
				if a == "OUT" {
					args[j] = filepath.Join(t.TempDir(), "run")
				}
			}
			before := proxy.arm(g.kill)
			r := runFerry(t, nil, args...)
			if proxy.firedCount() != before+1 {
				t.Fatalf("the gateway was not killed at the commit (exit %d, stderr %q)", r.code, r.stderr)
			}
			if r.code != 0 {
				t.Fatalf("exit %d, stderr %q; want 0: the snapshot is committed", r.code, r.stderr)
			}
			m := lost.FindStringSubmatch(r.stderr)
			if m == nil || strings.Count(r.stderr, "lost the relay") != 1 {
				t.Fatalf("stderr %q; want one line \"ferry: committed snapshot N of %s, then lost the relay: ...\"", r.stderr, key)
			}
			want := int64(i + 1)
			if m[1] != fmt.Sprint(want) {
				t.Errorf("stderr names snapshot %s, want %d", m[1], want)
			}
			if tc.json != nil {
				seq, relayLost := tc.json(t, r.stdout)
				if seq != want || !strings.Contains(relayLost, "relay lost") {
					t.Errorf("--json: snapshot %d, relay_lost %q; want %d and the relay's error", seq, relayLost, want)
				}
			}
			saved[want] = src
		})
		if t.Failed() {
			return
		}
	}

	// Each snapshot restores through another gateway, byte-identical.
	g := startGateway(t, true)
	gw := []string{"--gateway", "http://" + g.Addr}
	wantOK(t, runFerry(t, nil, append(gw, "-q", "sandbox", "create", "box")...))
	r := runFerry(t, nil, append(store, "--json", "session", "list", key)...)
	var list []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != len(saved) {
		t.Fatalf("list: %s (%v); want %d snapshots", r.stdout, err, len(saved))
	}
	for seq, src := range saved {
		back := fmt.Sprintf("back%d", seq)
		wantOK(t, runFerry(t, nil, append(append(store, gw...), "-q", "session", "restore", "--snapshot", fmt.Sprint(seq), key, "box:"+back)...))
		transfertest.EqualTrees(t, src, filepath.Join(g.Root, "box", back))
	}
	if r := runFerry(t, nil, append(store, "session", "verify")...); r.code != 0 {
		t.Fatalf("verify: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
}
