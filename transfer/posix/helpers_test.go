package posix_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/transfer/posix"
)

// flavor is a sandbox image as far as POSIX mode can tell: which sh, tar
// and tools PATH finds.
type flavor struct {
	name string
	// busybox lists the tools a sandbox's profile puts first on PATH as
	// busybox applets.
	busybox []string
	// tarVersion is a substring of `tar --version` in the sandbox.
	tarVersion string
}

var flavors = []flavor{
	{name: "gnu", tarVersion: "GNU tar"},
	{name: "busybox-tar", busybox: []string{"tar"}, tarVersion: "busybox"},
	// As on an Alpine image: sh and every tool the scripts use.
	{name: "busybox-all", busybox: []string{"sh", "tar", "find", "mv", "rm", "mkdir", "sleep", "ls", "touch", "chmod"}, tarVersion: "busybox"},
}

func needTools(t *testing.T, f flavor) {
	t.Helper()
	for _, p := range []string{"/bin/bash", "/usr/bin/busybox"} {
		if len(f.busybox) == 0 && p == "/usr/bin/busybox" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is required: %v", p, err)
			}
			t.Skipf("%s missing: %v", p, err)
		}
	}
}

// box is one sandbox of an embedded gateway.
type box struct {
	r    posix.Remote
	dir  string // the sandbox's directory: its workspace root and HOME
	name string
}

// newGateway starts an embedded gateway with cfg.
func newGateway(t *testing.T, cfg gateway.Config) (*gatewaytest.Gateway, *openshell.Client) {
	t.Helper()
	g := gatewaytest.Start(t, gatewaytest.Options{Config: cfg})
	return g, g.Client(t, openshell.Config{})
}

var boxes atomic.Int64

// newBox creates a sandbox on g whose login profile sets up flavor f,
// then prints banner (on stdout, and on stderr) if not empty.
func newBox(t *testing.T, g *gatewaytest.Gateway, c *openshell.Client, f flavor, banner string) box {
	t.Helper()
	needTools(t, f)
	name := fmt.Sprintf("box%d", boxes.Add(1))
	g.Sandbox(t, c, name)
	dir := filepath.Join(g.Root, name)
	var profile strings.Builder
	if len(f.busybox) > 0 {
		// The tools live outside the workspace so that they are not part
		// of any tree a test moves.
		bin := t.TempDir()
		for _, tool := range f.busybox {
			if err := os.Symlink("/usr/bin/busybox", filepath.Join(bin, tool)); err != nil {
				t.Fatal(err)
			}
		}
		fmt.Fprintf(&profile, "export PATH=%s:$PATH\n", bin)
	}
	if banner != "" {
		fmt.Fprintf(&profile, "printf '%%s\\n' %s\nprintf '%%s\\n' %s >&2\n", relay.Quote(banner), relay.Quote(banner))
	}
	if profile.Len() > 0 {
		if err := os.WriteFile(filepath.Join(dir, ".profile"), []byte(profile.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return box{r: posix.Remote{X: c, Sandbox: name}, dir: dir, name: name}
}

// gatewayBox is a fresh gateway with one sandbox of flavor f.
func gatewayBox(t *testing.T, f flavor, cfg gateway.Config, banner string) box {
	t.Helper()
	g, c := newGateway(t, cfg)
	return newBox(t, g, c, f, banner)
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// exec runs a shell command in b and returns its stdout.
func (b box) exec(t *testing.T, script string) string {
	t.Helper()
	var out, errb bytes.Buffer
	code, err := b.r.X.Exec(ctxFor(t), &relay.Command{Sandbox: b.r.Sandbox, Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb})
	if err != nil || code != 0 {
		t.Fatalf("exec %q: code %d, err %v, stderr %s", script, code, err, errb.String())
	}
	return out.String()
}

// entry is one member of a test tree.
type entry struct {
	name string // slash-separated, relative; directories end in "/"
	mode int64
	body string // file content, or a symlink's target
	link bool
}

func (e entry) dir() bool { return strings.HasSuffix(e.name, "/") }

var mtime = time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)

// tarOf makes a tar stream of entries with Go's archive/tar, as the
// host side of ferry does.
func tarOf(t *testing.T, root bool, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if root {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range entries {
		// Owners that exist nowhere: extraction must not restore them
		// (the tests may run as root, where tar would by default).
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: mtime, Format: tar.FormatPAX, Uid: 4242, Gid: 4243, Uname: "ferry-nobody", Gname: "ferry-nobody"}
		switch {
		case e.dir():
			h.Typeflag = tar.TypeDir
		case e.link:
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.body
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// payload is n deterministic bytes of every value.
func payload(n int, seed byte) string {
	b := make([]byte, n)
	x := uint32(seed) | 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return string(b)
}

// hostile names: spaces, quotes, leading dashes, globs, unicode.
var sampleTree = []entry{
	{name: "a/", mode: 0o755},
	{name: "a/hello.txt", mode: 0o644, body: "hello\n"},
	{name: "a/run.sh", mode: 0o755, body: "#!/bin/sh\necho hi\n"},
	{name: "a/secret", mode: 0o600, body: "s3cret"},
	{name: "a/empty/", mode: 0o700},
	{name: "a/link", link: true, body: "hello.txt", mode: 0o777},
	{name: "a/dangling", link: true, body: "../nowhere", mode: 0o777},
	{name: "sp ace/", mode: 0o755},
	{name: "sp ace/it's \"quoted\".txt", mode: 0o644, body: "q"},
	{name: "-dash/", mode: 0o755},
	{name: "-dash/--x", mode: 0o644, body: "dash"},
	{name: "ünï cødé ☃/", mode: 0o755},
	{name: "ünï cødé ☃/*[?]$HOME`x`", mode: 0o644, body: "glob"},
	{name: ".hidden", mode: 0o644, body: "dot"},
	{name: "..dots", mode: 0o644, body: "dots"},
	{name: "big.bin", mode: 0o644, body: payload(300<<10, 7)},
}

// tree reads the tree under dir on the host (the sandbox's disk).
func tree(t *testing.T, dir string) map[string]entry {
	t.Helper()
	got := map[string]entry{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		e := entry{name: rel, mode: int64(info.Mode().Perm())}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && (int(st.Uid) != os.Getuid() || int(st.Gid) != os.Getgid()) {
			return fmt.Errorf("%s: owner %d:%d restored from the archive", rel, st.Uid, st.Gid)
		}
		switch {
		case d.IsDir():
			e.name += "/"
		case d.Type()&fs.ModeSymlink != 0:
			e.link, e.mode = true, 0o777
			if e.body, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.body = string(b)
			if !info.ModTime().Equal(mtime) {
				return fmt.Errorf("%s: mtime %v, want %v", rel, info.ModTime(), mtime)
			}
		}
		got[e.name] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// untar reads a tar stream as a tree; names lose "./" and the root.
func untar(t *testing.T, b []byte) map[string]entry {
	t.Helper()
	got := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatalf("read downloaded tar: %v", err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if name == "" {
			continue
		}
		e := entry{name: name, mode: h.Mode & 0o7777}
		switch h.Typeflag {
		case tar.TypeDir:
			e.name = strings.TrimSuffix(name, "/") + "/"
		case tar.TypeSymlink:
			e.link, e.body, e.mode = true, h.Linkname, 0o777
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			e.body = string(b)
			if !h.ModTime.Equal(mtime) {
				t.Errorf("%s: downloaded mtime %v, want %v", name, h.ModTime, mtime)
			}
		default:
			t.Fatalf("%s: unexpected type %c", name, h.Typeflag)
		}
		if _, dup := got[e.name]; dup {
			t.Fatalf("%s twice in the stream", e.name)
		}
		got[e.name] = e
	}
}

func wantTree(entries []entry) map[string]entry {
	m := map[string]entry{}
	for _, e := range entries {
		m[e.name] = e
	}
	return m
}

func sameTree(t *testing.T, what string, got, want map[string]entry) {
	t.Helper()
	var names []string
	for n := range want {
		names = append(names, n)
	}
	for n := range got {
		if _, ok := want[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		g, gok := got[n]
		w, wok := want[n]
		switch {
		case !gok:
			t.Errorf("%s: %q missing", what, n)
		case !wok:
			t.Errorf("%s: %q unexpected", what, n)
		case g.link != w.link || g.body != w.body:
			t.Errorf("%s: %q differs (link %v/%v, %d/%d bytes)", what, n, g.link, w.link, len(g.body), len(w.body))
		case g.mode != w.mode:
			t.Errorf("%s: %q mode %o, want %o", what, n, g.mode, w.mode)
		}
	}
}

// leftovers lists what is under dir whose name says it is a ferry temp dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	var found []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".ferry-") {
			found = append(found, p)
		}
		return nil
	})
	return found
}

func noLeftovers(t *testing.T, dir string) {
	t.Helper()
	if l := leftovers(t, dir); len(l) > 0 {
		t.Errorf("temp dirs left behind: %q", l)
	}
}

// snapshot is a tree's listing with modes, sizes and file mtimes, to show
// it unchanged. Directory mtimes are left out: PlaceInto's temp dir lives
// inside dest, so even a refused upload touches dest's own mtime.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			fmt.Fprintf(&b, "%s %v\n", p, info.Mode())
			return nil
		}
		body := ""
		if d.Type().IsRegular() {
			c, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			body = fmt.Sprintf("%x", sha256.Sum256(c))
		}
		fmt.Fprintf(&b, "%s %v %d %v %s\n", p, info.Mode(), info.Size(), info.ModTime().UnixNano(), body)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func wantPathErr(t *testing.T, err error, target error, path string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err = %v, want %v", err, target)
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v (%T), want an *fs.PathError", err, err)
	}
	if pe.Path != path {
		t.Fatalf("error names %q, want %q (%v)", pe.Path, path, err)
	}
}

// countingExecer fails every call and counts them: for checks that must
// refuse before any call.
type countingExecer struct{ n atomic.Int64 }

func (c *countingExecer) Exec(context.Context, *relay.Command) (int, error) {
	c.n.Add(1)
	return 0, errors.New("no call expected")
}
