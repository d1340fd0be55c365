package agent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/cdc"
	"github.com/ferry-dev/ferry/transfer/frame"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// knownSeq is known, in the order given, as Scan takes it.
func knownSeq(known []agent.KnownFile) iter.Seq2[agent.KnownFile, error] {
	return func(yield func(agent.KnownFile, error) bool) {
		for _, k := range known {
			if !yield(k, nil) {
				return
			}
		}
	}
}

func scanAll(t *testing.T, c *agent.Client, dir string, known []agent.KnownFile) []agent.ScanEntry {
	t.Helper()
	var got []agent.ScanEntry
	if err := c.Scan(context.Background(), dir, knownSeq(known), agent.ScanOptions{}, func(e agent.ScanEntry) error {
		got = append(got, e)
		return nil
	}); err != nil {
		t.Fatalf("scan %s: %v", dir, err)
	}
	return got
}

// TestScan holds Scan to a walk of the same tree on the host: the same
// paths in walk order, kinds, modes, mtimes, targets, and chunks that are
// contiguous, add up to the file and hash to their ids.
func TestScan(t *testing.T) {
	c, ws := inProcess(t)
	dir := filepath.Join(ws, "tree")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	transfertest.RandomTree(t, dir, 7, transfertest.TreeOptions{BigFiles: 1, BigFileSize: 1 << 20})
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := scanAll(t, c, "tree", nil)

	i := 0
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeNamedPipe != 0 {
			return nil // skipped
		}
		if i == len(got) {
			t.Fatalf("scan ended before %s", rel)
		}
		e := got[i]
		i++
		if e.Path != filepath.ToSlash(rel) || e.MTime != fi.ModTime().UnixNano() || fs.FileMode(e.Mode) != fi.Mode().Perm() || e.Unchanged {
			t.Fatalf("entry %d: %+v, want %s with %v %v", i, e, rel, fi.Mode(), fi.ModTime())
		}
		switch {
		case fi.IsDir():
			if e.Kind != archive.Dir {
				t.Fatalf("%s: kind %v", rel, e.Kind)
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			if e.Kind != archive.Symlink || e.Target != target {
				t.Fatalf("%s: %v -> %q, want -> %q", rel, e.Kind, e.Target, target)
			}
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if e.Kind != archive.File || e.Size != int64(len(data)) {
				t.Fatalf("%s: %v of %d bytes, want %d", rel, e.Kind, e.Size, len(data))
			}
			var off int64
			for _, ch := range e.Chunks {
				sum := sha256.Sum256(data[off : off+ch.Size])
				if ch.Offset != off || ch.Size > int64(cdc.Default().Max) || sum != ch.ID {
					t.Fatalf("%s: chunk %+v at %d", rel, ch, off)
				}
				off += ch.Size
			}
			if off != int64(len(data)) {
				t.Fatalf("%s: chunks cover %d of %d bytes", rel, off, len(data))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if i != len(got) {
		t.Fatalf("scan sent %d entries, the walk found %d", len(got), i)
	}
}

// TestScanKnown: a known file with its size and mtime is reported
// unchanged without chunks; one whose mtime or size differs is chunked.
func TestScanKnown(t *testing.T) {
	c, ws := inProcess(t)
	for _, n := range []string{"same", "touched", "grown"} {
		if err := os.WriteFile(filepath.Join(ws, n), bytes.Repeat([]byte(n), 1000), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var known []agent.KnownFile
	for _, e := range scanAll(t, c, ".", nil) {
		known = append(known, agent.KnownFile{Path: e.Path, Size: e.Size, MTime: e.MTime})
	}
	known[2].MTime++ // grown, same, touched
	known[0].Size--
	for _, e := range scanAll(t, c, ".", known) {
		unchanged := e.Path == "same"
		if e.Unchanged != unchanged || (len(e.Chunks) == 0) != unchanged || e.Size != int64(len(e.Path)*1000) {
			t.Errorf("%s: unchanged %v, %d chunks, size %d", e.Path, e.Unchanged, len(e.Chunks), e.Size)
		}
	}
}

func TestScanRefusals(t *testing.T) {
	c, ws := inProcess(t)
	if err := os.WriteFile(filepath.Join(ws, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nop := func(agent.ScanEntry) error { return nil }
	err := c.Scan(ctx, "missing", nil, agent.ScanOptions{}, nop)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing dir: %v", err)
	}
	err = c.Scan(ctx, ".", nil, agent.ScanOptions{Params: cdc.Params{Min: 1, Avg: 3, Max: 4}}, nop)
	if re := (*agent.RemoteError)(nil); !errors.As(err, &re) || re.Code != codes.InvalidArgument {
		t.Errorf("bad params: %v", err)
	}
	err = c.Scan(ctx, ".", nil, agent.ScanOptions{Params: cdc.Params{Min: 1 << 20, Avg: 2 << 20, Max: 64 << 20}}, nop)
	if re := (*agent.RemoteError)(nil); !errors.As(err, &re) || re.Code != codes.InvalidArgument {
		t.Errorf("huge chunks: %v", err)
	}
	if err := c.Scan(ctx, "a\nb", nil, agent.ScanOptions{}, nop); !errors.Is(err, agent.ErrInvalidPath) {
		t.Errorf("newline: %v", err)
	}
	stop := errors.New("stop")
	if err := c.Scan(ctx, ".", nil, agent.ScanOptions{}, func(agent.ScanEntry) error { return stop }); err != stop {
		t.Errorf("fn's error: %v", err)
	}
}

// TestScanBatches: many entries come in several messages, all of them.
func TestScanBatches(t *testing.T) {
	c, ws := inProcess(t)
	rnd := rand.New(rand.NewPCG(1, 2))
	name := make([]byte, 200)
	const n = 8000
	for i := range n {
		for j := range name {
			name[j] = 'a' + byte(rnd.IntN(26))
		}
		if err := os.WriteFile(filepath.Join(ws, string(name)+string(rune('A'+i%26))), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := scanAll(t, c, ws, nil); len(got) != n {
		t.Fatalf("%d entries, want %d", len(got), n)
	}
}

// TestScanKnownStreamed: thousands of known files, in many batches, with
// files the walk does not find between and after the ones it does: each
// file the host knows unchanged is reported so, every other one chunked,
// and a walk that ends before the list does ends the scan.
func TestScanKnownStreamed(t *testing.T) {
	c, ws := inProcess(t)
	const n = 3 * 2048
	for i := range n {
		d := filepath.Join(ws, fmt.Sprintf("d%02d", i%7))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d", i)), []byte{byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var known []agent.KnownFile
	for _, e := range scanAll(t, c, ".", nil) {
		if e.Kind != archive.File {
			continue
		}
		k := agent.KnownFile{Path: e.Path, Size: e.Size, MTime: e.MTime}
		if len(known)%3 == 0 {
			k.MTime++ // changed since
		}
		// Gone since the host knew it: "d00/f00000-" sorts after
		// "d00/f00000" and before "d00/f00007" in walk order.
		known = append(known, k, agent.KnownFile{Path: k.Path + "-", Size: 1})
	}
	known = append(known, agent.KnownFile{Path: "zz/after-the-walk", Size: 1})
	unchanged := 0
	for _, e := range scanAll(t, c, ".", known) {
		if e.Kind != archive.File {
			continue
		}
		if e.Unchanged == (len(e.Chunks) > 0) {
			t.Fatalf("%s: unchanged %v with %d chunks", e.Path, e.Unchanged, len(e.Chunks))
		}
		if e.Unchanged {
			unchanged++
		}
	}
	if want := n - (n+2)/3; unchanged != want {
		t.Fatalf("%d files reported unchanged, want %d", unchanged, want)
	}
}

// TestScanKnownRefused: known files out of walk order are refused by the
// agent, and an error reading them ends the scan with that error.
func TestScanKnownRefused(t *testing.T) {
	c, ws := inProcess(t)
	for _, n := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(ws, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	nop := func(agent.ScanEntry) error { return nil }
	// Byte order, not walk order.
	unordered := knownSeq([]agent.KnownFile{{Path: "a-b"}, {Path: "a/x"}})
	err := c.Scan(ctx, ".", unordered, agent.ScanOptions{}, nop)
	if re := (*agent.RemoteError)(nil); !errors.As(err, &re) || re.Code != codes.InvalidArgument || !strings.Contains(err.Error(), `"a/x": out of walk order`) {
		t.Errorf("known files out of order: %v", err)
	}
	broken := errors.New("spill lost")
	failing := func(yield func(agent.KnownFile, error) bool) {
		if yield(agent.KnownFile{Path: "a", Size: 1}, nil) {
			yield(agent.KnownFile{}, broken)
		}
	}
	if err := c.Scan(ctx, ".", failing, agent.ScanOptions{}, nop); !errors.Is(err, broken) {
		t.Errorf("known files failing: %v", err)
	}
}

// TestScanKnownList: the Scan RPC, with every known file in its one
// request in any order (a path twice: the last counts), answers as
// ScanStream does.
func TestScanKnownList(t *testing.T) {
	c, ws := inProcess(t)
	for _, n := range []string{"a", "a-b", "b"} {
		if err := os.WriteFile(filepath.Join(ws, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(ws, "a.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	stamp := map[string]*agentv1.KnownFile{}
	for _, e := range scanAll(t, c, ".", nil) {
		stamp[e.Path] = &agentv1.KnownFile{Path: e.Path, Size: e.Size, MtimeUnixNano: e.MTime}
	}
	stale := &agentv1.KnownFile{Path: "b", Size: 99}
	known := []*agentv1.KnownFile{stamp["b"], stamp["a-b"], stale, stamp["a"], {Path: "a", Size: 99}, stamp["a"]}
	stream, err := agent.RawRPC(c).Scan(context.Background(), &agentv1.ScanRequest{Dir: ".", Known: known})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range m.GetEntries() {
			got[e.GetPath()] = e.GetUnchanged()
		}
	}
	if want := map[string]bool{"a": true, "a-b": true, "a.d": false, "b": false}; !maps.Equal(got, want) {
		t.Fatalf("unchanged: %v, want %v", got, want)
	}
}

// TestScanInline: with an inline budget the agent sends, with their
// entries, the chunks of a file the host does not know and those past a
// known file's size, each as it is (checked by Inline), and no others;
// nothing past the budget.
func TestScanInline(t *testing.T) {
	c, ws := inProcess(t)
	dir := filepath.Join(ws, "s")
	rng := rand.New(rand.NewPCG(7, 8))
	content := func(n int) []byte {
		// Numbered lines: compressible, so zstd travels, and no two
		// chunks alike.
		var b bytes.Buffer
		for b.Len() < n {
			fmt.Fprintf(&b, `{"line":%d,"text":"%x"}`+"\n", rng.Uint64(), rng.Uint32()&0xff)
		}
		return b.Bytes()[:n]
	}
	files := map[string][]byte{"new": content(300 << 10), "grown": content(400 << 10), "touched": content(200 << 10)}
	for name, b := range files {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const grownFrom = 100 << 10
	known := []agent.KnownFile{{Path: "grown", Size: grownFrom, MTime: 1}, {Path: "touched", Size: 200 << 10, MTime: 1}}
	for _, tc := range []struct {
		name   string
		budget int64
	}{{"budget", 8 << 20}, {"none", 0}, {"small", 100 << 10}} {
		t.Run(tc.name, func(t *testing.T) {
			var sent int64
			err := c.Scan(context.Background(), "s", knownSeq(known), agent.ScanOptions{InlineBytes: tc.budget, Compress: frame.Auto}, func(e agent.ScanEntry) error {
				for _, ch := range e.Chunks {
					plain, _, _, ok, err := ch.Inline(nil)
					if err != nil {
						return fmt.Errorf("%s at %d: %w", e.Path, ch.Offset, err)
					}
					due := e.Path == "new" || e.Path == "grown" && ch.Offset+ch.Size > grownFrom
					if ok && !due {
						t.Errorf("%s at %d: sent inline, the host may hold it", e.Path, ch.Offset)
					}
					if !ok && due && tc.budget == 8<<20 {
						t.Errorf("%s at %d: not sent inline", e.Path, ch.Offset)
					}
					if ok {
						sent += ch.Size
						if !bytes.Equal(plain, files[e.Path][ch.Offset:ch.Offset+ch.Size]) {
							t.Errorf("%s at %d: inline bytes differ from the file's", e.Path, ch.Offset)
						}
						if ch.InlineSize() >= ch.Size {
							t.Errorf("%s at %d: %d inline bytes for %d of compressible data", e.Path, ch.Offset, ch.InlineSize(), ch.Size)
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if sent > tc.budget || tc.budget > 0 && sent == 0 {
				t.Errorf("%d bytes inline for a budget of %d", sent, tc.budget)
			}
		})
	}
}
