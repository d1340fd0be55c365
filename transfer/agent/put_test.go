package agent_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/agent/server"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// addAll is a fill that adds src under name.
func addAll(src, name string) func(*archive.Writer) error {
	return func(w *archive.Writer) error { return w.Add(context.Background(), src, name) }
}

func TestPutRoundTrip(t *testing.T) {
	src := t.TempDir()
	tree := transfertest.RandomTree(t, src, 3, transfertest.TreeOptions{BigFiles: 1, BigFileSize: 600<<10 + 5})
	want := archive.Stats{Files: tree.Files, Dirs: tree.Dirs, Symlinks: tree.Symlinks, Bytes: tree.Bytes}
	for _, tc := range []struct {
		name  string
		place archive.Placement
		dest  string // relative to the workspace
		setup func(t *testing.T, ws string)
		got   string // where src's tree lands, relative to the workspace
		item  string // Add's name
	}{
		{name: "new", place: archive.PlaceNew, dest: "out", got: "out", item: "."},
		{name: "new with missing parents", place: archive.PlaceNew, dest: "a/b/out", got: "a/b/out", item: "."},
		{name: "into", place: archive.PlaceInto, dest: "d", got: "d/tree", item: "tree",
			setup: func(t *testing.T, ws string) { mustFile(t, filepath.Join(ws, "d", "keep"), "keep") }},
		{name: "into through a symlink", place: archive.PlaceInto, dest: "l", got: "d/tree", item: "tree",
			setup: func(t *testing.T, ws string) {
				mustFile(t, filepath.Join(ws, "d", "keep"), "keep")
				if err := os.Symlink("d", filepath.Join(ws, "l")); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "absolute dest", place: archive.PlaceNew, got: "abs", item: "."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, ws := inProcess(t)
			if tc.setup != nil {
				tc.setup(t, ws)
			}
			dest := tc.dest
			if dest == "" {
				dest = filepath.Join(ws, tc.got)
			}
			res, err := c.Put(context.Background(), agent.PutSpec{Dest: dest, Place: tc.place}, addAll(src, tc.item))
			if err != nil {
				t.Fatal(err)
			}
			wantStats := want
			if tc.item != "." {
				wantStats.Dirs++
			}
			if res.Stats != wantStats || res.Entries != wantStats.Files+wantStats.Dirs+wantStats.Symlinks || res.WireBytes < wantStats.Bytes {
				t.Errorf("result %+v, want %+v", res, wantStats)
			}
			transfertest.EqualTrees(t, src, filepath.Join(ws, tc.got))
			transfertest.CheckSafe(t, ws)
			if tc.place == archive.PlaceInto {
				if got := listDir(t, filepath.Join(ws, "d")); !slices.Equal(got, []string{"keep", "tree"}) {
					t.Errorf("dest holds %q", got)
				}
			}
		})
	}
}

func TestPutAs(t *testing.T) {
	c, ws := inProcess(t)
	src := filepath.Join(t.TempDir(), "f")
	mustFile(t, src, "as a file")
	mustFile(t, filepath.Join(ws, "x", "as"), "replaced")
	for _, dest := range []string{"x/as", "y/z/new"} {
		res, err := c.Put(context.Background(), agent.PutSpec{Dest: dest, Place: archive.PlaceAs}, addAll(src, "any"))
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(ws, dest)); err != nil || string(b) != "as a file" || res.Files != 1 || res.Entries != 1 {
			t.Fatalf("%s: %q, %v, %+v", dest, b, err, res)
		}
	}
	if got := listDir(t, filepath.Join(ws, "x")); !slices.Equal(got, []string{"as"}) {
		t.Errorf("x holds %q", got)
	}
}

// compressible makes a tree of text files that zstd shrinks well.
func compressible(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	for i := range 8 {
		line := strings.Repeat("the quick brown fox jumps over the lazy dog ", 3) + "\n"
		data := strings.Repeat(line, 2000+i)
		mustFile(t, filepath.Join(dir, "f"+string(rune('a'+i))), data)
		total += int64(len(data))
	}
	return total
}

func TestPutCompression(t *testing.T) {
	src := t.TempDir()
	total := compressible(t, src)
	for _, mode := range []frame.Mode{frame.Auto, frame.Zstd, frame.None} {
		t.Run(mode.String(), func(t *testing.T) {
			c, ws := inProcess(t)
			res, err := c.Put(context.Background(), agent.PutSpec{Dest: "out", Compress: mode}, addAll(src, "."))
			if err != nil {
				t.Fatal(err)
			}
			transfertest.EqualTrees(t, src, filepath.Join(ws, "out"))
			if res.Bytes != total {
				t.Errorf("Bytes %d, want %d", res.Bytes, total)
			}
			if mode == frame.None && res.WireBytes <= total {
				t.Errorf("none: %d wire bytes for %d bytes of files", res.WireBytes, total)
			}
			if mode != frame.None && res.WireBytes > total/10 {
				t.Errorf("%v: %d wire bytes for %d bytes of text", mode, res.WireBytes, total)
			}
		})
	}
}

func TestPutRefusals(t *testing.T) {
	outside := t.TempDir()
	for _, tc := range []struct {
		name     string
		setup    func(t *testing.T, ws, src string)
		spec     agent.PutSpec
		sentinel error
		entry    string
	}{
		{
			name: "symlink out of dest",
			setup: func(t *testing.T, ws, src string) {
				mustFile(t, filepath.Join(src, "f"), "f")
				if err := os.Symlink(filepath.Join("..", "..", filepath.Base(outside)), filepath.Join(src, "esc")); err != nil {
					t.Fatal(err)
				}
			},
			spec: agent.PutSpec{Dest: "out"}, sentinel: archive.ErrLinkEscape, entry: "esc",
		},
		{
			name:  "file over limit",
			setup: func(t *testing.T, ws, src string) { mustFile(t, filepath.Join(src, "big"), strings.Repeat("x", 100)) },
			spec:  agent.PutSpec{Dest: "out", Limits: archive.Limits{MaxFileSize: 10}}, sentinel: archive.ErrLimit, entry: "big",
		},
		{
			name: "new over existing",
			setup: func(t *testing.T, ws, src string) {
				mustFile(t, filepath.Join(src, "f"), "f")
				mustFile(t, filepath.Join(ws, "out", "old"), "old")
			},
			spec: agent.PutSpec{Dest: "out"}, sentinel: fs.ErrExist,
		},
		{
			name:  "into missing",
			setup: func(t *testing.T, ws, src string) { mustFile(t, filepath.Join(src, "f"), "f") },
			spec:  agent.PutSpec{Dest: "out", Place: archive.PlaceInto}, sentinel: fs.ErrNotExist,
		},
		{
			name: "into a file",
			setup: func(t *testing.T, ws, src string) {
				mustFile(t, filepath.Join(src, "f"), "f")
				mustFile(t, filepath.Join(ws, "out"), "a file")
			},
			spec: agent.PutSpec{Dest: "out", Place: archive.PlaceInto}, sentinel: syscall.ENOTDIR,
		},
		{
			name: "into: a directory over a file",
			setup: func(t *testing.T, ws, src string) {
				mustFile(t, filepath.Join(src, "f", "x"), "x")
				mustFile(t, filepath.Join(ws, "out", "f"), "a file")
			},
			spec: agent.PutSpec{Dest: "out", Place: archive.PlaceInto}, sentinel: fs.ErrExist, entry: "f/",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ws := inProcess(t)
			src := t.TempDir()
			tc.setup(t, ws, src)
			before := listDir(t, filepath.Join(ws, "out"))
			_, err := c.Put(context.Background(), tc.spec, addAll(src, "."))
			t.Log(err)
			wantEntryErr(t, err, tc.sentinel, tc.entry)
			var re *agent.RemoteError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), "put out") {
				t.Errorf("err = %v, want a *RemoteError naming the destination", err)
			}
			if got := listDir(t, filepath.Join(ws, "out")); !slices.Equal(got, before) {
				t.Errorf("dest holds %q, had %q", got, before)
			}
			if got := listDir(t, ws); len(got) > 1 {
				t.Errorf("workspace holds %q", got)
			}
		})
	}
}

func TestPutInvalid(t *testing.T) {
	c, _ := inProcess(t)
	for _, dest := range []string{"", "a\x00b", "a\nb"} {
		_, err := c.Put(context.Background(), agent.PutSpec{Dest: dest}, addAll(t.TempDir(), "."))
		if !errors.Is(err, agent.ErrInvalidPath) {
			t.Errorf("dest %q: err = %v", dest, err)
		}
	}
}

// TestPutFillFails: when the host's side fails mid-stream, Put returns
// its error only once the agent has refused the stream and removed its
// staging: nothing is left in the workspace, with no waiting.
func TestPutFillFails(t *testing.T) {
	c, ws := inProcess(t)
	src := t.TempDir()
	transfertest.RandomTree(t, src, 7, transfertest.TreeOptions{Entries: 40})
	errFill := errors.New("fill failed")
	_, err := c.Put(context.Background(), agent.PutSpec{Dest: "out"}, func(w *archive.Writer) error {
		if err := w.Add(context.Background(), src, "."); err != nil {
			return err
		}
		return errFill
	})
	if !errors.Is(err, errFill) {
		t.Fatalf("err = %v", err)
	}
	if left, _ := os.ReadDir(ws); len(left) != 0 {
		t.Fatalf("workspace holds %v after a failed Put", left)
	}
	// The connection survives a cancelled call.
	if _, err := c.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// rawPut sends a Put as the given messages through the generated client,
// bypassing Client.Put's honest trailer.
func rawPut(t *testing.T, c *agent.Client, msgs []*agentv1.PutRequest) error {
	t.Helper()
	stream, err := agent.RawRPC(c).Put(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			break // the status tells why
		}
	}
	_, err = stream.CloseAndRecv()
	return err
}

func header(dest string, place agentv1.Placement) *agentv1.PutRequest {
	return &agentv1.PutRequest{Msg: &agentv1.PutRequest_Header{Header: &agentv1.PutHeader{Dest: dest, Place: place}}}
}

func dataMsgs(b []byte) []*agentv1.PutRequest {
	var out []*agentv1.PutRequest
	for _, c := range chunks(b, 100<<10) {
		out = append(out, &agentv1.PutRequest{Msg: &agentv1.PutRequest_Data{Data: c}})
	}
	return out
}

func trailerMsg(tr *agentv1.Trailer) *agentv1.PutRequest {
	return &agentv1.PutRequest{Msg: &agentv1.PutRequest_Trailer{Trailer: tr}}
}

// TestPutHostileHost sends the agent streams that an honest host never
// does, in both archive formats the agent takes: the agent refuses each,
// with the reason and entry in the status, and places nothing.
func TestPutHostileHost(t *testing.T) {
	src := t.TempDir()
	transfertest.RandomTree(t, src, 5, transfertest.TreeOptions{Entries: 30})
	for _, format := range []archive.Format{archive.FormatTar, archive.FormatEntries} {
		t.Run(format.String(), func(t *testing.T) { putHostileHost(t, src, format) })
	}
}

func putHostileHost(t *testing.T, src string, format archive.Format) {
	good, goodTr := treeArchive(t, src, format)
	firstFile := goodTr.Files[0].GetName()
	lastFile := goodTr.Files[len(goodTr.Files)-1].GetName()
	fr := framed(t, good, frame.WriterOptions{})
	tamper := func(f func(tr *agentv1.Trailer)) *agentv1.Trailer {
		tr := proto.Clone(goodTr).(*agentv1.Trailer)
		f(tr)
		return tr
	}
	type putCase struct {
		name   string
		msgs   []*agentv1.PutRequest
		code   codes.Code
		reason string
		entry  string
	}
	tests := []putCase{
		{"honest", slices.Concat(dataMsgs(fr), []*agentv1.PutRequest{trailerMsg(goodTr)}), codes.OK, "", ""},
		{"wrong digest", slices.Concat(dataMsgs(fr), []*agentv1.PutRequest{trailerMsg(tamper(func(tr *agentv1.Trailer) { tr.Files[0].Digest[3] ^= 1 }))}),
			codes.DataLoss, "DIGEST", firstFile},
		{"wrong size", slices.Concat(dataMsgs(fr), []*agentv1.PutRequest{trailerMsg(tamper(func(tr *agentv1.Trailer) { tr.Files[0].Size++ }))}),
			codes.DataLoss, "DIGEST", firstFile},
		{"file missing from trailer", slices.Concat(dataMsgs(fr), []*agentv1.PutRequest{trailerMsg(tamper(func(tr *agentv1.Trailer) { tr.Files = tr.Files[:len(tr.Files)-1] }))}),
			codes.DataLoss, "DIGEST", lastFile},
		{"extra count", slices.Concat(dataMsgs(fr), []*agentv1.PutRequest{trailerMsg(tamper(func(tr *agentv1.Trailer) { tr.Entries++ }))}),
			codes.DataLoss, "SHORT", ""},
		{"fewer counted", slices.Concat(dataMsgs(fr), []*agentv1.PutRequest{trailerMsg(tamper(func(tr *agentv1.Trailer) { tr.Entries-- }))}),
			codes.DataLoss, "DIGEST", ""},
		{"wrong bytes", slices.Concat(dataMsgs(fr), []*agentv1.PutRequest{trailerMsg(tamper(func(tr *agentv1.Trailer) { tr.Bytes++ }))}),
			codes.DataLoss, "DIGEST", ""},
		{"no trailer", dataMsgs(fr), codes.DataLoss, "TRUNCATED", ""},
		{"frame cut before its trailer", slices.Concat(dataMsgs(fr[:len(fr)-53]), []*agentv1.PutRequest{trailerMsg(goodTr)}),
			codes.DataLoss, "TRUNCATED", ""},
		// Cut inside the stream's first frame block (its first 64 KiB
		// of archive): nothing of the tree arrives.
		{"frame cut in a block", slices.Concat(dataMsgs(fr[:min(len(fr)/2, 32<<10)]), []*agentv1.PutRequest{trailerMsg(goodTr)}),
			codes.DataLoss, "TRUNCATED", "#1"},
		{"data after the trailer", slices.Concat(dataMsgs(fr), []*agentv1.PutRequest{trailerMsg(goodTr)}, dataMsgs([]byte("more"))),
			codes.DataLoss, "DIGEST", ""},
		// Bytes in the frame stream after the archive's own end, which
		// its reader does not read: the tree reader refuses them.
		{"data after the archive", slices.Concat(dataMsgs(framed(t, append(bytes.Clone(good), "more"...), frame.WriterOptions{})), []*agentv1.PutRequest{trailerMsg(goodTr)}),
			codes.DataLoss, "DIGEST", ""},
		{"no header", dataMsgs(fr), codes.InvalidArgument, "", ""},
	}
	if format == archive.FormatTar {
		// An entry stream's names are archive's tests (TestEntriesHostileFixtures).
		dotdot, dotdotTr := makeTar(t, tarEntry{name: "ok", data: "ok"}, tarEntry{name: "../x", data: "x"})
		tests = append(tests, putCase{"dot-dot entry", slices.Concat(dataMsgs(framed(t, dotdot, frame.WriterOptions{})), []*agentv1.PutRequest{trailerMsg(dotdotTr)}),
			codes.InvalidArgument, "UNSAFE_PATH", "../x"})
	} else {
		// The agent reads what the header says: a tar is no entry stream
		// (a malformed header, as a tar's is: no reason of its own).
		tests = append(tests, putCase{"a tar", slices.Concat(dataMsgs(framed(t, treeTarOnly(t, src), frame.WriterOptions{})), []*agentv1.PutRequest{trailerMsg(goodTr)}),
			codes.Unknown, "", "#1"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, ws := inProcess(t)
			msgs := tc.msgs
			if tc.name != "no header" {
				h := header("out", agentv1.Placement_PLACEMENT_NEW)
				h.GetHeader().Format = wire.Formats[format]
				msgs = append([]*agentv1.PutRequest{h}, msgs...)
			}
			err := rawPut(t, c, msgs)
			code, reason, entry := statusReason(err)
			if code != tc.code || reason != tc.reason || entry != tc.entry {
				t.Fatalf("err = %v: %v %q %q, want %v %q %q", err, code, reason, entry, tc.code, tc.reason, tc.entry)
			}
			if tc.code == codes.OK {
				transfertest.EqualTrees(t, src, filepath.Join(ws, "out"))
				return
			}
			if got := listDir(t, ws); got != nil {
				t.Errorf("workspace holds %q", got)
			}
		})
	}
}

// An archive format the agent does not know is refused before any data.
func TestPutUnknownFormat(t *testing.T) {
	c, ws := inProcess(t)
	h := header("out", agentv1.Placement_PLACEMENT_NEW)
	h.GetHeader().Format = agentv1.ArchiveFormat(7)
	err := rawPut(t, c, []*agentv1.PutRequest{h})
	if code, _, _ := statusReason(err); code != codes.InvalidArgument || !strings.Contains(err.Error(), "unknown archive format") {
		t.Fatalf("err = %v, want InvalidArgument naming the format", err)
	}
	if got := listDir(t, ws); got != nil {
		t.Errorf("workspace holds %q", got)
	}
}

func treeTarOnly(t *testing.T, dir string) []byte {
	b, _ := treeTar(t, dir)
	return b
}

// putFake is an agent whose Put records the data messages' sizes and
// answers with resp.
type putFake struct {
	agentv1.UnimplementedAgentServer
	sizes []int
	resp  *agentv1.PutResponse
}

func (f *putFake) Put(stream agentv1.Agent_PutServer) error {
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		if d := m.GetData(); d != nil {
			f.sizes = append(f.sizes, len(d))
		}
		if m.GetTrailer() != nil {
			return stream.SendAndClose(f.resp)
		}
	}
}

func TestPutMessagesAndAgentReply(t *testing.T) {
	src := t.TempDir()
	mustFile(t, filepath.Join(src, "big"), strings.Repeat("incompressible? no, but None ", 40000))
	for i := range 300 {
		mustFile(t, filepath.Join(src, "small", strings.Repeat("s", 1+i%50)+string(rune('a'+i%26))+strings.Repeat("x", i/26)), "tiny")
	}
	honest := &agentv1.PutResponse{}
	fake := &putFake{resp: honest}
	c := fakeAgent(t, fake)
	_, err := c.Put(context.Background(), agent.PutSpec{Dest: "out", Compress: frame.None}, addAll(src, "."))
	if !errors.Is(err, archive.ErrDigest) {
		t.Fatalf("an agent that reports other counts: err = %v, want ErrDigest", err)
	}
	if len(fake.sizes) < 3 {
		t.Fatalf("%d data messages", len(fake.sizes))
	}
	var sum int
	for i, n := range fake.sizes {
		sum += n
		if n == 0 || n > agent.ChunkSize {
			t.Errorf("message %d of %d: %d bytes, want 1 to ChunkSize", i, len(fake.sizes), n)
		}
	}

	w := archive.NewWriter(io.Discard)
	if err := w.Add(context.Background(), src, "."); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	fake.resp = &agentv1.PutResponse{Stats: &agentv1.Stats{Files: st.Files, Dirs: st.Dirs, Symlinks: st.Symlinks, Bytes: st.Bytes}}
	res, err := c.Put(context.Background(), agent.PutSpec{Dest: "out", Compress: frame.None}, addAll(src, "."))
	if err != nil || res.Stats != st || res.WireBytes != int64(sum) {
		t.Fatalf("%+v, %v; want %+v and %d wire bytes", res, err, st, sum)
	}
}

// TestPutCutStagingRemoved: a connection cut while a Put streams ends
// the agent's server only after the call has removed its staging.
func TestPutCutStagingRemoved(t *testing.T) {
	ws := t.TempDir()
	c, cut := agenttest.Cuttable(t, server.Config{Workspace: ws})
	if _, err := c.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "big"), noise(3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Put(context.Background(), agent.PutSpec{Dest: "out"}, func(w *archive.Writer) error {
			if err := w.Add(context.Background(), src, "."); err != nil {
				return err
			}
			<-release
			return nil
		})
		done <- err
	}()
	staged := false
	for range 500 {
		if m, _ := filepath.Glob(filepath.Join(ws, ".ferry-staging-*")); len(m) > 0 {
			staged = true
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !staged {
		t.Fatal("no staging directory appeared")
	}
	cut()
	close(release)
	if err := <-done; err == nil {
		t.Fatal("Put over a cut connection succeeded")
	}
	c.Close() // waits for the server to return
	if left, _ := os.ReadDir(ws); len(left) != 0 {
		t.Fatalf("workspace holds %v once the server has returned", left)
	}
}

// noise is n bytes that do not compress.
func noise(n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{7}).Read(b)
	return b
}

// TestPutIntoIfDir: with IntoIfDir, the agent places the archive's one
// entry into dest when dest is a directory (a symlink to one followed),
// and as dest otherwise, making missing parents; a directory over a file
// is refused with the file left alone; and IntoIfDir with any placement
// but PlaceAs is refused.
func TestPutIntoIfDir(t *testing.T) {
	c, ws := inProcess(t)
	src := t.TempDir()
	mustFile(t, filepath.Join(src, "f.txt"), "new")
	mustFile(t, filepath.Join(src, "d", "inner"), "in")
	mustFile(t, filepath.Join(ws, "existing", "keep"), "k")
	mustFile(t, filepath.Join(ws, "file"), "old")
	if err := os.Symlink("existing", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, item, dest string
		place            archive.Placement
		check            string // a file that must hold want afterwards
		want             string
		sentinel         error
	}{
		{"file into a dir", "f.txt", "existing", archive.PlaceAs, "existing/f.txt", "new", nil},
		{"file as a missing path", "f.txt", "fresh/deeper/g.txt", archive.PlaceAs, "fresh/deeper/g.txt", "new", nil},
		{"file over a file", "f.txt", "file", archive.PlaceAs, "file", "new", nil},
		{"dir into a symlinked dir", "d", "link", archive.PlaceAs, "existing/d/inner", "in", nil},
		{"dir as a missing path", "d", "newdir", archive.PlaceAs, "newdir/inner", "in", nil},
		{"dir over a file", "d", "file", archive.PlaceAs, "file", "new", fs.ErrExist},
		{"not with PlaceNew", "f.txt", "other", archive.PlaceNew, "", "", errInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Put(context.Background(), agent.PutSpec{Dest: tc.dest, Place: tc.place, IntoIfDir: true}, addAll(filepath.Join(src, tc.item), tc.item))
			var re *agent.RemoteError
			switch {
			case tc.sentinel == errInvalidArgument:
				if !errors.As(err, &re) || re.Code != codes.InvalidArgument {
					t.Fatalf("err = %v, want InvalidArgument", err)
				}
			case tc.sentinel != nil:
				if !errors.Is(err, tc.sentinel) {
					t.Fatalf("err = %v, want %v", err, tc.sentinel)
				}
			case err != nil:
				t.Fatal(err)
			}
			if tc.check == "" {
				return
			}
			got, err := os.ReadFile(filepath.Join(ws, tc.check))
			if err != nil || string(got) != tc.want {
				t.Errorf("%s = %q, %v; want %q", tc.check, got, err, tc.want)
			}
		})
	}
	if got, err := os.ReadFile(filepath.Join(ws, "existing", "keep")); err != nil || string(got) != "k" {
		t.Errorf("existing/keep = %q, %v", got, err)
	}
}

// errInvalidArgument stands for a refusal of the request itself.
var errInvalidArgument = errors.New("invalid argument")
