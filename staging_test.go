package ferry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/relaytest"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// dropRelay is a relay that drops for good when drop is called: the
// execs in flight are cancelled as a vanished client's are (the gateway
// then kills their process group with SIGKILL, so nothing in the sandbox
// cleans up), and every later exec fails at once with relay.ErrRelayLost
// (so the host cannot clean up either).
type dropRelay struct {
	x relay.Execer
	// box, when set, is the id of the sandbox whose processes the drop
	// kills first (see killSandbox).
	box     string
	mu      sync.Mutex
	down    bool
	cancels map[*relay.Command]context.CancelFunc
	cut     int // commands running when it dropped
}

func (d *dropRelay) drop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.box != "" {
		killSandbox(d.box)
	}
	d.down = true
	d.cut = len(d.cancels)
	for _, cancel := range d.cancels {
		cancel()
	}
}

// dropped says how many commands were running when the relay dropped.
func (d *dropRelay) dropped() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cut
}

func (d *dropRelay) isDown() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.down
}

func (d *dropRelay) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d.mu.Lock()
	if d.down {
		d.mu.Unlock()
		return 0, fmt.Errorf("%w: the test's relay is down", relay.ErrRelayLost)
	}
	if d.cancels == nil {
		d.cancels = map[*relay.Command]context.CancelFunc{}
	}
	d.cancels[cmd] = cancel
	d.mu.Unlock()
	code, err := d.x.Exec(ctx, cmd)
	d.mu.Lock()
	delete(d.cancels, cmd)
	d.mu.Unlock()
	if d.isDown() {
		return 0, fmt.Errorf("%w: the test's relay dropped: %v", relay.ErrRelayLost, err)
	}
	return code, err
}

// holdRelay holds the stdin of its execs once it has carried after bytes,
// until release is closed: a transfer stopped mid-stream, its staging
// live.
type holdRelay struct {
	x       relay.Execer
	after   int64
	release chan struct{}
}

func (h holdRelay) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	cc := *cmd
	if cmd.Stdin != nil {
		cc.Stdin = &holdReader{r: cmd.Stdin, left: h.after, release: h.release}
	}
	return h.x.Exec(ctx, &cc)
}

type holdReader struct {
	r       io.Reader
	left    int64
	release chan struct{}
}

func (r *holdReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		<-r.release
		return r.r.Read(p)
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.r.Read(p)
	r.left -= int64(n)
	return n, err
}

// stagingPattern is what a mode's staging directories are called, under
// their own name or their first (with the maker's pid).
func stagingPattern(mode transfer.Mode) *regexp.Regexp {
	if mode == transfer.ModePOSIX {
		return regexp.MustCompile(`^\.ferry-up-[0-9a-f]+(\.[0-9]+)?$`)
	}
	return regexp.MustCompile(`^\.ferry-staging-[0-9a-f]+(\.[0-9]+)?$`)
}

// stagingDirs lists the staging directories of mode in dir.
func stagingDirs(t *testing.T, dir string, mode transfer.Mode) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		if stagingPattern(mode).MatchString(de.Name()) {
			out = append(out, de.Name())
		}
	}
	return out
}

// awaitStale waits (bounded) until the staging directory dir is stale:
// in agent mode its marker's lock free, in POSIX mode the pid in it gone.
// The gateway kills a dropped exec's processes once it notices the drop,
// a little after the host has.
func awaitStale(t *testing.T, dir string, mode transfer.Mode) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if mode == transfer.ModePOSIX {
			b, err := os.ReadFile(filepath.Join(dir, "pid"))
			if base := filepath.Base(dir); strings.LastIndexByte(base, '.') > 0 && err != nil {
				b, err = []byte(base[strings.LastIndexByte(base, '.')+1:]), nil // not yet renamed: the pid is in the name
			}
			pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || perr != nil || syscall.Kill(pid, 0) == syscall.ESRCH {
				return
			}
			continue
		}
		f, err := os.Open(filepath.Join(dir, "lock"))
		if err != nil {
			return
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		f.Close()
		if err == nil {
			return
		}
	}
	t.Fatalf("%s stayed live", dir)
}

// killSandbox SIGKILLs every process that sandbox id runs on this
// machine (the embedded gateway marks them all), as an OOM kill or the
// end of a node would: nothing in the sandbox gets to clean up. It
// returns how many it signalled.
func killSandbox(id string) int {
	n := 0
	for _, pid := range relaytest.WithEnv("FERRY_SANDBOX_ID=" + id) {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// TestSessionRestoreRelayDropStaging drops the relay for good in the
// middle of session restores, so that neither the sandbox (its processes
// killed outright: a relay drop alone gives them their stdin's EOF, on
// which they clean up) nor the host (no exec gets through) can clean up,
// into a missing
// target (staging beside it) and into an empty one (staging inside it).
// The next restore into the same target, the relay back, removes what the
// dropped one left, says so in its log, and restores the tree whole; the
// directory holds nothing else.
func TestSessionRestoreRelayDropStaging(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) { testSessionRestoreRelayDropStaging(t, mode) })
	}
}

// savedSession is a sandbox "box" (root on the host) in mode with its log
// in logs, and a store holding its directory sess as key "k": n files of
// 64 KiB and up to extra more, in three directories.
type savedSession struct {
	g    *gatewaytest.Gateway
	c    *openshell.Client
	root string
	sb   ferry.Sandbox
	logs *syncBuffer
	st   *session.Store
	rng  *rand.Rand // what made the files, for what comes next
}

func newSavedSession(t *testing.T, mode transfer.Mode, seed uint64, n, extra int) savedSession {
	t.Helper()
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	ss := savedSession{g: g, c: c, root: filepath.Join(g.Root, "box"), sb: sandboxFor(t, c, mode), logs: &syncBuffer{}}
	ss.sb.Logger = slog.New(slog.NewTextHandler(ss.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	rng := rand.New(rand.NewPCG(seed, seed+1))
	ss.rng = rng
	files := map[string]string{}
	for i := range n {
		files[filepath.Join("sess", "d"+strconv.Itoa(i%3), "f"+strconv.Itoa(i))] = noise(rng, 64<<10+rng.IntN(extra))
	}
	write(t, ss.root, files)
	ss.st, _ = newStore(t, nil)
	if _, err := ferry.SaveSession(ctx(t), ss.sb, ss.st, session.SaveSpec{Dir: "sess", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	return ss
}

func testSessionRestoreRelayDropStaging(t *testing.T, mode transfer.Mode) {
	ss := newSavedSession(t, mode, 23, 48, 128<<10)
	c, root, sb, logs, st, rng := ss.c, ss.root, ss.sb, ss.logs, ss.st, ss.rng
	boxID, err := c.SandboxID(ctx(t), "box")
	if err != nil {
		t.Fatal(err)
	}
	left := 0
	for i := range 6 {
		empty := i%2 == 1
		t.Run(fmt.Sprintf("%d-empty=%v", i, empty), func(t *testing.T) {
			target := filepath.Join(root, "sub", "dst")
			parent := filepath.Dir(target)
			if err := os.RemoveAll(parent); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(parent, 0o755); err != nil {
				t.Fatal(err)
			}
			in := parent
			if empty {
				if err := os.Mkdir(target, 0o755); err != nil {
					t.Fatal(err)
				}
				in = target
			}
			// The relay drops a moment after the sandbox has begun to
			// stage: mid-stream.
			drop := &dropRelay{x: c, box: boxID}
			dsb := sb
			dsb.X = drop
			delay := time.Duration(rng.IntN(3000)) * time.Microsecond
			done := make(chan struct{})
			watched := make(chan struct{})
			go func() {
				defer close(watched)
				for range 10000 {
					select {
					case <-done:
						return
					case <-time.After(200 * time.Microsecond):
					}
					if len(stagingDirs(t, in, mode)) > 0 {
						time.Sleep(delay)
						drop.drop()
						return
					}
				}
			}()
			_, err := ferry.RestoreSession(ctx(t), dsb, st, session.RestoreSpec{Key: "k", Dir: "sub/dst"})
			close(done)
			<-watched
			if err == nil {
				t.Logf("the restore finished before the relay dropped (%v after staging)", delay)
				return
			}
			if !errors.Is(err, relay.ErrRelayLost) {
				t.Fatalf("restore with the relay dropped %v after staging began: err = %v, want ErrRelayLost", delay, err)
			}
			// The next operation comes once nothing the dropped restore
			// ran is left: a process the kill missed (one forked as it
			// came) may still make or hold its staging.
			for i := 0; killSandbox(boxID) > 0; i++ {
				if i == 1000 {
					t.Fatal("the dropped restore's processes would not die")
				}
				time.Sleep(10 * time.Millisecond)
			}
			stale := stagingDirs(t, in, mode)
			t.Logf("relay dropped %v after staging began: %v; left %v", delay, err, stale)
			for _, s := range stale {
				awaitStale(t, filepath.Join(in, s), mode)
			}
			if len(stale) > 0 {
				left++
			}
			before := logs.String()
			if _, err := ferry.RestoreSession(ctx(t), sb, st, session.RestoreSpec{Key: "k", Dir: "sub/dst"}); err != nil {
				t.Fatalf("the next restore: %v", err)
			}
			transfertest.EqualTrees(t, filepath.Join(root, "sess"), target)
			if got := stagingDirs(t, in, mode); len(got) != 0 {
				var what []string
				for _, g := range got {
					des, _ := os.ReadDir(filepath.Join(in, g))
					pid, _ := os.ReadFile(filepath.Join(in, g, "pid"))
					what = append(what, fmt.Sprintf("%s (holding %v, pid %q)", g, des, pid))
				}
				t.Fatalf("after the next restore %s holds %v; it logged %q", in, what, strings.TrimPrefix(logs.String(), before))
			}
			if des, _ := os.ReadDir(parent); len(des) != 1 || des[0].Name() != "dst" {
				t.Fatalf("after the next restore %s holds %v, want only dst", parent, des)
			}
			logged := strings.TrimPrefix(logs.String(), before)
			want := fmt.Sprintf("count=%d", len(stale))
			if len(stale) > 0 && (!strings.Contains(logged, "removed stale staging directories") || !strings.Contains(logged, want)) {
				t.Fatalf("the next restore logged %q, want its removal of %d", logged, len(stale))
			}
		})
	}
	if left == 0 {
		t.Fatal("no dropped restore left a staging directory: the test did not reach the case")
	}
	t.Logf("%d of 6 dropped restores left a staging directory, each removed by the next", left)
}

// TestSessionRestoreSparesLiveStaging: a restore into a directory where
// another restore is staging (held mid-stream) removes a stale staging
// directory there and leaves the live one alone; both restores succeed.
func TestSessionRestoreSparesLiveStaging(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) { testSessionRestoreSparesLiveStaging(t, mode) })
	}
}

func testSessionRestoreSparesLiveStaging(t *testing.T, mode transfer.Mode) {
	ss := newSavedSession(t, mode, 25, 16, 64<<10)
	c, root, sb, logs, st := ss.c, ss.root, ss.sb, ss.logs, ss.st
	sub := filepath.Join(root, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}

	// A restore held once 256 KiB have crossed: its staging is live.
	release := make(chan struct{})
	hsb := sb
	hsb.X = holdRelay{x: c, after: 256 << 10, release: release}
	held := make(chan error, 1)
	go func() {
		_, err := ferry.RestoreSession(context.Background(), hsb, st, session.RestoreSpec{Key: "k", Dir: "sub/a"})
		held <- err
	}()
	var live []string
	for range 1000 {
		// Under its own name: it carries its maker's pid only while it
		// is being made.
		if live = stagingDirs(t, sub, mode); len(live) > 0 && !strings.Contains(live[0][2:], ".") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(live) != 1 {
		close(release)
		t.Fatalf("the held restore's staging: %v, want one", live)
	}
	// And a stale one, as a killed transfer leaves it.
	stale := filepath.Join(sub, map[transfer.Mode]string{transfer.ModePOSIX: ".ferry-up-00ff", transfer.ModeAgent: archive.StagingPrefix + "00ff"}[mode])
	marker := map[transfer.Mode][2]string{transfer.ModePOSIX: {"pid", "999999999\n"}, transfer.ModeAgent: {"lock", "ferry staging directory\npid 999999999\n"}}[mode]
	write(t, stale, map[string]string{marker[0]: marker[1], "tree/half": "half"})

	before := logs.String()
	if _, err := ferry.RestoreSession(ctx(t), sb, st, session.RestoreSpec{Key: "k", Dir: "sub/b"}); err != nil {
		close(release)
		t.Fatalf("the second restore: %v", err)
	}
	logged := strings.TrimPrefix(logs.String(), before)
	got := stagingDirs(t, sub, mode)
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("the held restore: %v", err)
	}
	if len(got) != 1 || got[0] != live[0] {
		t.Fatalf("beside the second restore %v remained, want only the live %v", got, live)
	}
	if !strings.Contains(logged, "removed stale staging directories") || !strings.Contains(logged, "count=1") {
		t.Errorf("the second restore logged %q, want its removal of the stale one", logged)
	}
	transfertest.EqualTrees(t, filepath.Join(root, "sess"), filepath.Join(sub, "a"))
	transfertest.EqualTrees(t, filepath.Join(root, "sess"), filepath.Join(sub, "b"))
	if des, _ := os.ReadDir(sub); len(des) != 2 {
		t.Fatalf("%s holds %v, want a and b", sub, des)
	}
}

// TestDownloadCancelledStaging: a download cancelled mid-stream, as
// ferry's SIGINT cancels it, leaves nothing beside its destination on the
// host once it has returned; a staging directory that a killed ferry left
// there (its marker free) goes with the next download, which logs it.
func TestDownloadCancelledStaging(t *testing.T) { forModes(t, testDownloadCancelledStaging) }

func testDownloadCancelledStaging(t *testing.T, mode variant) {
	e := newEnvVia(t, mode)
	var logs syncBuffer
	e.sb.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	rng := rand.New(rand.NewPCG(27, 28))
	files := map[string]string{}
	for i := range 40 {
		files[filepath.Join("tree", "f"+strconv.Itoa(i))] = noise(rng, 128<<10)
	}
	write(t, e.root, files)
	local := t.TempDir()
	dst := filepath.Join(local, "down")
	cctx, cancel := context.WithCancel(ctx(t))
	staged := make(chan struct{})
	go func() {
		defer close(staged)
		for range 2000 {
			if des, _ := os.ReadDir(local); len(des) > 0 {
				cancel()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	_, err := ferry.Download(cctx, e.sb, []string{"tree"}, dst, archive.Limits{})
	cancel()
	<-staged
	if err == nil {
		t.Skip("the download finished before it could be cancelled")
	}
	if des, _ := os.ReadDir(local); len(des) != 0 {
		t.Fatalf("a cancelled download left %v", des)
	}
	stale := filepath.Join(local, archive.StagingPrefix+"0badc0de")
	write(t, stale, map[string]string{"lock": "ferry staging directory\npid 999999999\n", "tree/tree/f0": "half"})
	if _, err := ferry.Download(ctx(t), e.sb, []string{"tree"}, dst, archive.Limits{}); err != nil {
		t.Fatal(err)
	}
	if des, _ := os.ReadDir(local); len(des) != 1 || des[0].Name() != "down" {
		t.Fatalf("after the next download %s holds %v, want only down", local, des)
	}
	if l := logs.String(); !strings.Contains(l, "removed stale staging directories") || !strings.Contains(l, "side=host") || !strings.Contains(l, "count=1") {
		t.Errorf("logged %q, want the host's removal of one", l)
	}
}

// TestUploadCancelledStaging: an upload cancelled mid-stream, as ferry's
// SIGINT cancels it, has removed its staging directory in the sandbox by
// the time it returns.
func TestUploadCancelledStaging(t *testing.T) { forModes(t, testUploadCancelledStaging) }

func testUploadCancelledStaging(t *testing.T, mode variant) {
	e := newEnvVia(t, mode)
	local := t.TempDir()
	noiseTree(t, local, 60, 29)
	cctx, cancel := context.WithCancel(ctx(t))
	staged := make(chan bool, 1)
	go func() {
		for range 5000 {
			if len(stagingDirs(t, e.root, mode.Mode)) > 0 {
				cancel()
				staged <- true
				return
			}
			time.Sleep(time.Millisecond)
		}
		staged <- false
	}()
	_, err := ferry.Upload(cctx, e.sb, []string{filepath.Join(local, "tree")}, "up")
	cancel()
	if !<-staged {
		t.Skip("the upload finished before it could be cancelled")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled upload: err = %v, want context.Canceled", err)
	}
	if got := stagingDirs(t, e.root, mode.Mode); len(got) != 0 {
		t.Fatalf("a cancelled upload left %v", got)
	}
	if _, err := os.Lstat(filepath.Join(e.root, "up")); !os.IsNotExist(err) {
		t.Fatalf("a cancelled upload placed up (%v)", err)
	}
}
