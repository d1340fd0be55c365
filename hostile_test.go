package ferry_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest/hostile"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// refused are the fixtures in testdata/archives that a hostile sandbox's
// tar may send and that ferry must refuse (transfer's fixture tests map
// each to its sentinel and entry; here they come through the real path).
var refused = []string{
	"dotdot", "dotdot-inner", "absolute", "pax-path-dotdot", "gnu-longname-dotdot", "root-file", "root-symlink",
	"symlink-escape-write-through", "symlink-absolute", "symlink-write-through", "symlink-chain-escape",
	"symlink-chain-late", "symlink-chain-dotdot", "symlink-loop", "symlink-outside-overwrite", "symlink-swap",
	"file-then-symlink", "dir-then-file-swap", "dir-then-symlink-swap", "file-then-dir", "file-as-parent",
	"hardlink-outside", "hardlink-absolute", "hardlink-forward", "hardlink-through-symlink", "hardlink-to-dir",
	"hardlink-to-symlink", "chardev", "blockdev", "fifo", "unknown-type", "gnu-dumpdir",
	"long-name", "long-linkname", "huge-pax", "pax-chain", "huge-gnu-longname", "huge-file",
	"truncated", "truncated-header", "truncated-pax", "no-eoa", "one-zero-block", "bad-checksum",
	"sparse-gnu", "sparse-pax-0.0", "sparse-pax-0.1", "sparse-pax-1.0",
}

// TestHostileSandboxTar replaces the sandbox's tar, through its login
// profile, with one that sends a crafted archive, and downloads: CLI-side
// library → gateway → sandbox → back. Every archive must fail the copy,
// leave nothing at the destination, and touch nothing beside it.
func TestHostileSandboxTar(t *testing.T) {
	e := newEnv(t, transfer.ModePOSIX)
	fixtures, err := filepath.Abs(filepath.Join("testdata", "archives"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, e.root, map[string]string{"x/file": "real content", "bin/": ""})
	if err := os.WriteFile(filepath.Join(e.root, ".profile"), []byte("export PATH=\"$HOME/bin:$PATH\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range refused {
		t.Run(name, func(t *testing.T) {
			tarPath := filepath.Join(fixtures, name+".tar")
			if _, err := os.Stat(tarPath); err != nil {
				t.Fatal(err)
			}
			fake := "#!/bin/sh\nexec cat '" + tarPath + "'\n"
			if err := os.WriteFile(filepath.Join(e.root, "bin", "tar"), []byte(fake), 0o755); err != nil {
				t.Fatal(err)
			}
			parent := t.TempDir()
			write(t, parent, map[string]string{"outside/victim": "victim", "existing/keep": "keep"})
			before := tree(t, parent)
			for _, dst := range []string{filepath.Join(parent, "new"), filepath.Join(parent, "existing")} {
				_, err := ferry.Download(ctx(t), e.sb, []string{"x"}, dst, archive.Limits{})
				if err == nil {
					t.Fatalf("download into %s succeeded", dst)
				}
				var ee *archive.EntryError
				if !errors.As(err, &ee) && !errors.Is(err, archive.ErrTruncated) {
					t.Fatalf("err = %v, want an archive.EntryError naming the entry", err)
				}
			}
			sameTree(t, tree(t, parent), before)
		})
	}
}

// TestShortTarIsCaught: a sandbox tar that sends a well-formed archive
// holding less than was asked for (a stream that ended early but cleanly)
// must not pass for the whole tree.
func TestShortTarIsCaught(t *testing.T) {
	e := newEnv(t, transfer.ModePOSIX)
	write(t, e.root, map[string]string{"x/a": "1", "x/b": "2", "x/c": "3", "bin/": ""})
	// One entry of the three, with proper end blocks.
	var short bytes.Buffer
	tw := tar.NewWriter(&short)
	tw.WriteHeader(&tar.Header{Name: "x/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "x/a", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("1"))
	tw.Close()
	tarPath := filepath.Join(t.TempDir(), "short.tar")
	if err := os.WriteFile(tarPath, short.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.root, ".profile"), []byte("export PATH=\"$HOME/bin:$PATH\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fake := "#!/bin/sh\nexec cat '" + tarPath + "'\n"
	if err := os.WriteFile(filepath.Join(e.root, "bin", "tar"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "got")
	if _, err := ferry.Download(ctx(t), e.sb, []string{"x"}, dst, archive.Limits{}); !errors.Is(err, transfer.ErrShort) {
		t.Fatalf("short archive: err = %v, want ErrShort", err)
	}
	if _, err := os.Lstat(dst); !os.IsNotExist(err) {
		t.Fatalf("a short archive was placed at %s (%v)", dst, err)
	}
}

// plantTar makes the sandbox's login shell find script as tar, for all
// but `tar --version` (download.sh asks which tar it has).
func plantTar(t *testing.T, e env, script string) {
	t.Helper()
	write(t, e.root, map[string]string{"bin/": ""})
	if err := os.WriteFile(filepath.Join(e.root, ".profile"), []byte("export PATH=\"$HOME/bin:$PATH\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.root, "bin", "tar"), []byte("#!/bin/sh\n[ \"$1\" = --version ] && exit 0\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestHostileSandboxTarRefusals: a hostile tar's archives that must fail
// a download with a given sentinel, naming the entry, through the real
// path, with the host directory as it was.
func TestHostileSandboxTarRefusals(t *testing.T) {
	e := newEnv(t, transfer.ModePOSIX)
	write(t, e.root, map[string]string{"x/file": "real", "payload/x": "x\n"})
	for _, tc := range []struct {
		archive string
		src     string
		into    bool // download into an existing directory, not to a new path
		want    error
		entry   string
	}{
		// `ferry cp box:payload ~/`: the stream carries a .bashrc too.
		{archive: "unrequested-top-level", src: "payload", into: true, want: archive.ErrUnrequested, entry: ".bashrc"},
		{archive: "unrequested-root", src: "payload", into: true, want: archive.ErrUnrequested, entry: "./"},
		// 2 GiB of zeros from a few KiB on the wire, as the contents
		// asked for (`tar -C x -c .`: every name is requested).
		{archive: "sparse-gnu", src: "x/.", want: archive.ErrUnsupported, entry: "sparse"},
		{archive: "sparse-pax-0.0", src: "x/.", want: archive.ErrUnsupported, entry: "sparse"},
		{archive: "sparse-pax-0.1", src: "x/.", want: archive.ErrUnsupported, entry: "sparse"},
		{archive: "sparse-pax-1.0", src: "x/.", want: archive.ErrUnsupported, entry: "sparse"},
		{archive: "sparse-pax-1.0", src: "x", into: true, want: archive.ErrUnrequested, entry: "existing"},
	} {
		t.Run(fmt.Sprintf("%s/into=%v", tc.archive, tc.into), func(t *testing.T) {
			tarPath, err := filepath.Abs(filepath.Join("testdata", "archives", tc.archive+".tar"))
			if err != nil {
				t.Fatal(err)
			}
			plantTar(t, e, "exec cat '"+tarPath+"'")
			parent := t.TempDir()
			home := filepath.Join(parent, "home")
			write(t, parent, map[string]string{"home/.bashrc": "mine\n", "home/payload/keep": "keep\n", "outside/victim": "victim"})
			before := tree(t, parent)
			dst := filepath.Join(parent, "new")
			if tc.into {
				dst = home
			}
			_, err = ferry.Download(ctx(t), e.sb, []string{tc.src}, dst, archive.Limits{})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			var ee *archive.EntryError
			if !errors.As(err, &ee) || ee.Entry != tc.entry {
				t.Fatalf("err = %v, want an archive.EntryError naming %q", err, tc.entry)
			}
			sameTree(t, tree(t, parent), before)
		})
	}
}

// TestIdleSandboxTar: a sandbox tar that sends one byte and then nothing,
// or nothing at all, or a byte at a time, or does not read what is uploaded, ends the copy
// with ErrIdle soon after the timeout; one that sends a whole archive
// slowly but steadily, with pauses shorter than the timeout, is fine.
func TestIdleSandboxTar(t *testing.T) {
	e := newEnv(t, transfer.ModePOSIX)
	write(t, e.root, map[string]string{"x/file": "real", "rascal-meta/meta.json": "{}"})
	const timeout = 500 * time.Millisecond
	sb := e.sb
	sb.IdleTimeout = timeout
	local := t.TempDir()
	write(t, local, map[string]string{"up/f": "f"})
	for _, tc := range []struct {
		name, tar string
		op        string // "download", "upload", "pull"
	}{
		{name: "dribble then silence", tar: "printf x; exec sleep 20", op: "download"},
		{name: "silence", tar: "exec sleep 20", op: "download"},
		// A byte every 100ms: 5 bytes a timeout, under minIdleRate's 32.
		{name: "dribble", tar: `i=0; while [ "$i" -lt 200 ]; do printf x; sleep 0.1; i=$((i+1)); done`, op: "download"},
		{name: "upload not read", tar: "exec sleep 20", op: "upload"},
		{name: "pull silence", tar: "printf x; exec sleep 20", op: "pull"},
		// A run's inputs are a transfer too; its command is not.
		{name: "run inputs not read", tar: "exec sleep 20", op: "run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plantTar(t, e, tc.tar)
			dst := filepath.Join(t.TempDir(), "got")
			start := time.Now()
			var err error
			switch tc.op {
			case "upload":
				_, err = ferry.Upload(ctx(t), sb, []string{filepath.Join(local, "up")}, "up")
			case "pull":
				_, err = ferry.Pull(ctx(t), sb, ferry.PullSpec{Out: dst})
			case "run":
				_, err = ferry.Run(ctx(t), sb, ferry.RunSpec{Argv: []string{"true"}, Out: t.TempDir(),
					Inputs: []ferry.Mapping{{Local: filepath.Join(local, "up"), Remote: "up"}}})
			default:
				_, err = ferry.Download(ctx(t), sb, []string{"x"}, dst, archive.Limits{})
			}
			took := time.Since(start)
			if !errors.Is(err, ferry.ErrIdle) {
				t.Fatalf("err = %v, want ErrIdle", err)
			}
			if !strings.Contains(err.Error(), "box") || !strings.Contains(err.Error(), timeout.String()) {
				t.Errorf("error %q does not name the sandbox and the timeout", err)
			}
			if took < timeout || took > 10*time.Second {
				t.Errorf("took %v with an idle timeout of %v", took, timeout)
			}
			if tc.op == "pull" {
				if got := tree(t, dst); len(got) != 0 {
					t.Errorf("the pull placed %v", got)
				}
			} else if _, err := os.Lstat(dst); !os.IsNotExist(err) {
				t.Errorf("something was placed at %s (%v)", dst, err)
			}
			t.Logf("%v after %v", err, took)
		})
	}
	t.Run("slow but steady", func(t *testing.T) {
		// A timeout of its own, five times the pauses: on a loaded machine
		// a pause may run long, and the case is about a stream that never
		// stops, not about how punctual the sandbox's sleep is.
		const timeout = time.Second
		sb := e.sb
		sb.IdleTimeout = timeout
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		// What `tar -C x -c .` sends, with a comment to make it long.
		tw.WriteHeader(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755})
		tw.WriteHeader(&tar.Header{Name: "./file", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4,
			PAXRecords: map[string]string{"comment": strings.Repeat("c", 4000)}})
		tw.Write([]byte("real"))
		tw.Close()
		tarPath := filepath.Join(t.TempDir(), "slow.tar")
		if err := os.WriteFile(tarPath, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		// 512 bytes every 200ms, read from one open file: 13 blocks, 2.6s
		// for the whole, more than twice the timeout.
		blocks := b.Len() / 512
		plantTar(t, e, fmt.Sprintf(`exec 3<'%s'; i=0; while [ "$i" -lt %d ]; do dd bs=512 count=1 <&3 2>/dev/null; sleep 0.2; i=$((i+1)); done`, tarPath, blocks))
		dst := filepath.Join(t.TempDir(), "got")
		start := time.Now()
		if _, err := ferry.Download(ctx(t), sb, []string{"x/."}, dst, archive.Limits{}); err != nil {
			t.Fatalf("a steady stream failed: %v", err)
		}
		if took := time.Since(start); took < 2*timeout {
			t.Errorf("took %v: the stream was not slow", took)
		}
		sameTree(t, tree(t, dst), map[string]string{"file": "real"})
	})
}

// TestIdleNotForCommands: a run's command may be silent for longer than
// the idle timeout; only its transfers are watched.
func TestIdleNotForCommands(t *testing.T) {
	e := newEnv(t, transfer.ModePOSIX)
	write(t, e.root, map[string]string{"rascal-meta/meta.json": "{}"})
	sb := e.sb
	// Short, and yet long enough for the pull's exec on a loaded machine:
	// the case is the command's silence, two and a half timeouts of it.
	sb.IdleTimeout = 600 * time.Millisecond
	res, err := ferry.Run(ctx(t), sb, ferry.RunSpec{Argv: []string{"sleep", "1.5"}, Out: t.TempDir()})
	if err != nil || res.ExitCode != 0 || res.PullErr != nil {
		t.Fatalf("a silent command: %+v, %v", res, err)
	}
}

// stallX is a relay on which the agent's exec stops moving, after a
// number of bytes, in one direction: stdout (the sandbox stops sending) or
// stdin (it stops reading). The stalled call returns once the exec's own
// context ends.
type stallX struct {
	x     relay.Execer
	after int64
	stdin bool
}

func (s stallX) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	if a := cmd.Argv; a[len(a)-1] != "serve" {
		return s.x.Exec(ctx, cmd)
	}
	c := *cmd
	if s.stdin {
		c.Stdin = &stallReader{r: cmd.Stdin, ctx: ctx, left: s.after}
	} else {
		c.Stdout = &stallWriter{w: cmd.Stdout, ctx: ctx, left: s.after}
	}
	return s.x.Exec(ctx, &c)
}

type stallWriter struct {
	w    io.Writer
	ctx  context.Context
	left int64
}

func (s *stallWriter) Write(p []byte) (int, error) {
	if s.left <= 0 {
		<-s.ctx.Done()
		return 0, s.ctx.Err()
	}
	s.left -= int64(len(p))
	return s.w.Write(p)
}

type stallReader struct {
	r    io.Reader
	ctx  context.Context
	left int64
}

func (s *stallReader) Read(p []byte) (int, error) {
	if s.left <= 0 {
		<-s.ctx.Done()
		return 0, s.ctx.Err()
	}
	n, err := s.r.Read(p[:min(int64(len(p)), s.left)])
	s.left -= int64(n)
	return n, err
}

// TestIdleAgentMode: in agent mode, an agent whose exec stops sending, or
// stops reading, mid-transfer ends the Get or Put with ErrIdle.
func TestIdleAgentMode(t *testing.T) {
	e := newEnv(t, transfer.ModeAgent)
	big := make([]byte, 4<<20)
	rand.Read(big)
	write(t, e.root, map[string]string{"big": string(big)})
	local := t.TempDir()
	write(t, local, map[string]string{"up/big": string(big)})
	const timeout = 500 * time.Millisecond
	for _, upload := range []bool{false, true} {
		t.Run(fmt.Sprintf("upload=%v", upload), func(t *testing.T) {
			sb := e.sb
			sb.IdleTimeout = timeout
			sb.X = stallX{x: e.sb.X, after: 256 << 10, stdin: upload}
			dst := filepath.Join(t.TempDir(), "got")
			start := time.Now()
			var err error
			if upload {
				_, err = ferry.Upload(ctx(t), sb, []string{filepath.Join(local, "up")}, "up")
			} else {
				_, err = ferry.Download(ctx(t), sb, []string{"big"}, dst, archive.Limits{})
			}
			took := time.Since(start)
			if !errors.Is(err, ferry.ErrIdle) {
				t.Fatalf("err = %v, want ErrIdle", err)
			}
			// The idle watch ends the agent's exec too: its close would
			// otherwise give the stalled agent 8 s (exitWait) to exit.
			if took < timeout || took > 5*time.Second {
				t.Errorf("took %v with an idle timeout of %v", took, timeout)
			}
			if _, err := os.Lstat(dst); !os.IsNotExist(err) {
				t.Errorf("something was placed at %s (%v)", dst, err)
			}
			if _, err := os.Lstat(filepath.Join(e.root, "up")); !os.IsNotExist(err) {
				t.Errorf("the stalled upload placed up (%v)", err)
			}
			t.Logf("%v after %v", err, took)
		})
	}
}

// TestHostileSandboxTarSession: a session save in POSIX mode reads the
// sandbox's tar like a download, so every hostile archive fails it too,
// on a directory store and on S3, and leaves the store's snapshots as
// they were: the victim key, saved before the tar turned, restores byte
// for byte.
func TestHostileSandboxTarSession(t *testing.T) {
	for _, sk := range hostileStores(t) {
		t.Run(sk.name, func(t *testing.T) {
			e := newEnv(t, transfer.ModePOSIX)
			st, b := sk.open(t)
			victim := map[string]string{"secret": "the victim's", "d/": "", "d/more": "more"}
			write(t, filepath.Join(e.root, "sess"), victim)
			if _, err := ferry.SaveSession(ctx(t), e.sb, st, session.SaveSpec{Dir: "sess", Key: "victim"}); err != nil {
				t.Fatal(err)
			}
			fixtures, err := filepath.Abs(filepath.Join("testdata", "archives"))
			if err != nil {
				t.Fatal(err)
			}
			before := objects(t, b)
			for _, name := range refused {
				plantTar(t, e, "exec cat '"+filepath.Join(fixtures, name+".tar")+"'")
				_, err := ferry.SaveSession(ctx(t), e.sb, st, session.SaveSpec{Dir: "sess", Key: "attacker"})
				var ee *archive.EntryError
				if err == nil || (!errors.As(err, &ee) && !errors.Is(err, archive.ErrTruncated)) {
					t.Fatalf("%s: save: err = %v, want an archive.EntryError naming the entry", name, err)
				}
			}
			if !sameObjects(before, objects(t, b)) {
				t.Fatal("refused saves changed the store's snapshots")
			}
			if err := os.Remove(filepath.Join(e.root, "bin", "tar")); err != nil {
				t.Fatal(err)
			}
			if _, err := ferry.RestoreSession(ctx(t), e.sb, st, session.RestoreSpec{Key: "victim", Dir: "again"}); err != nil {
				t.Fatal(err)
			}
			sameTree(t, tree(t, filepath.Join(e.root, "again")), victim)
		})
	}
}

// TestIdleNotForSessionWait: a session save that waits, with the agent's
// channel quiet, for a prune of the store to finish is the host waiting,
// not a stalled sandbox: it must not end as idle (which would lose the
// session), in a run and on its own.
func TestIdleNotForSessionWait(t *testing.T) {
	e := newEnv(t, transfer.ModeAgent)
	b, err := local.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A short TTL polls the prune's lock often: the saves end soon after
	// it expires.
	st, err := session.New(session.Config{Backend: b, LockTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sb := e.sb
	// Half the prune's wait below: the wait outlasts the timeout, and the
	// run's restore, pull and save, watched, have room on a loaded machine.
	sb.IdleTimeout = time.Second
	// A prune's lock, as another node's prune writes it, live for 2s.
	const ttl = 2 * time.Second
	pruning := func(t *testing.T, name string) {
		t.Helper()
		lock := fmt.Sprintf(`{"kind":"prune","ttl":%d,"host":"other","pid":1}`, ttl)
		if err := b.Put(ctx(t), "locks/prune/"+name, strings.NewReader(lock), true); err != nil {
			t.Fatal(err)
		}
	}
	write(t, e.root, map[string]string{"sess/s": "s"})
	// Warm the agent, so that the save's own time is the wait.
	if _, err := ferry.SaveSession(ctx(t), sb, st, session.SaveSpec{Dir: "sess", Key: "warm"}); err != nil {
		t.Fatal(err)
	}
	t.Run("run", func(t *testing.T) {
		pruning(t, "0123456789abcdef01234567")
		start := time.Now()
		res, err := ferry.Run(ctx(t), sb, ferry.RunSpec{
			Argv: []string{"sh", "-c", "mkdir -p rascal-meta && echo '{}' > rascal-meta/meta.json"},
			Out:  t.TempDir(), Sessions: []ferry.SessionMapping{{Key: "task-1", Remote: "sess"}}, Store: st,
		})
		took := time.Since(start)
		if err != nil || res.PullErr != nil || res.SessionErr != nil {
			t.Fatalf("run: %v / %v / %v", err, res.PullErr, res.SessionErr)
		}
		if s := res.Sessions[0].Saved; s == nil || s.Snapshot != 1 {
			t.Fatalf("session %+v", res.Sessions[0])
		}
		// The save waited out the prune: the wait this test is about
		// happened.
		if took < ttl-500*time.Millisecond {
			t.Fatalf("the run took %v: its save did not wait for the prune's lock (%v)", took, ttl)
		}
	})
	t.Run("save", func(t *testing.T) {
		pruning(t, "89abcdef0123456789abcdef")
		start := time.Now()
		res, err := ferry.SaveSession(ctx(t), sb, st, session.SaveSpec{Dir: "sess", Key: "task-2"})
		if err != nil || res.Snapshot != 1 {
			t.Fatalf("save: %+v, %v", res, err)
		}
		if took := time.Since(start); took < ttl-500*time.Millisecond {
			t.Fatalf("the save took %v: it did not wait for the prune's lock (%v)", took, ttl)
		}
	})
}

// TestIdleSession: a session save or restore through an agent that stops
// answering ends with ErrIdle.
func TestIdleSession(t *testing.T) {
	h := newHostileBox(t, hostile.Scenario{}, false)
	st, _ := hostileStores(t)[0].open(t)
	write(t, h.root, map[string]string{"sess/s": "s"})
	if _, err := ferry.SaveSession(ctx(t), h.sb, st, session.SaveSpec{Dir: "sess", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	h.served(t)
	sb := h.sb
	sb.IdleTimeout = 300 * time.Millisecond
	h.lie(t, hostile.Scenario{ScanStall: true})
	if _, err := ferry.SaveSession(ctx(t), sb, st, session.SaveSpec{Dir: "sess", Key: "k"}); !errors.Is(err, ferry.ErrIdle) {
		t.Fatalf("save through a stalled agent: err = %v, want ferry.ErrIdle", err)
	}
	h.served(t)
	h.lie(t, hostile.Scenario{PutStall: true})
	if _, err := ferry.RestoreSession(ctx(t), sb, st, session.RestoreSpec{Key: "k", Dir: "again"}); !errors.Is(err, ferry.ErrIdle) {
		t.Fatalf("restore through a stalled agent: err = %v, want ferry.ErrIdle", err)
	}
	h.served(t)
}
