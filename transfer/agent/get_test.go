package agent_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

func TestGetRoundTrip(t *testing.T) {
	c, ws := inProcess(t)
	src := filepath.Join(ws, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	tree := transfertest.RandomTree(t, src, 7, transfertest.TreeOptions{BigFiles: 1, BigFileSize: 1<<20 + 3})
	mtime := time.Unix(1_600_000_000, 987654321)
	if err := os.Chmod(src, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(src, time.Time{}, mtime); err != nil {
		t.Fatal(err)
	}
	mustFile(t, filepath.Join(ws, "one"), "one file")
	want := archive.Stats{Files: tree.Files, Dirs: tree.Dirs, Symlinks: tree.Symlinks, Bytes: tree.Bytes}
	for _, tc := range []struct {
		name  string
		spec  agent.GetSpec
		setup func(t *testing.T, local string)
		got   string // where src lands under local
		stats archive.Stats
	}{
		{name: "new, contents", spec: agent.GetSpec{Dir: "src", Names: []string{"."}, Place: archive.PlaceNew}, stats: want},
		{name: "new, absolute dir", spec: agent.GetSpec{Dir: src, Names: []string{"."}, Place: archive.PlaceNew}, stats: want},
		{name: "into", spec: agent.GetSpec{Names: []string{"src"}, Place: archive.PlaceInto}, got: "src",
			setup: func(t *testing.T, local string) { mustFile(t, filepath.Join(local, "keep"), "keep") },
			stats: archive.Stats{Files: want.Files, Dirs: want.Dirs + 1, Symlinks: want.Symlinks, Bytes: want.Bytes}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local := filepath.Join(t.TempDir(), "out")
			if tc.setup != nil {
				tc.setup(t, local)
			}
			tc.spec.Local = local
			res, err := c.Get(context.Background(), tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if res.Stats != tc.stats || res.Entries != tc.stats.Files+tc.stats.Dirs+tc.stats.Symlinks || res.WireBytes == 0 {
				t.Errorf("result %+v, want %+v", res, tc.stats)
			}
			got := filepath.Join(local, tc.got)
			transfertest.EqualTrees(t, src, got)
			transfertest.CheckSafe(t, local)
			if fi, err := os.Stat(got); err != nil || fi.Mode().Perm() != 0o750 || !fi.ModTime().Equal(mtime) {
				t.Errorf("%s: %v, %v: want the source's mode and mtime", got, fi, err)
			}
		})
	}
	t.Run("as", func(t *testing.T) {
		local := filepath.Join(t.TempDir(), "renamed")
		mustFile(t, local, "replaced")
		res, err := c.Get(context.Background(), agent.GetSpec{Names: []string{"one"}, Local: local, Place: archive.PlaceAs})
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(local); err != nil || string(b) != "one file" || res.Files != 1 {
			t.Fatalf("%q %v %+v", b, err, res)
		}
	})
	t.Run("empty directory", func(t *testing.T) {
		if err := os.Mkdir(filepath.Join(ws, "empty"), 0o755); err != nil {
			t.Fatal(err)
		}
		local := filepath.Join(t.TempDir(), "out")
		res, err := c.Get(context.Background(), agent.GetSpec{Dir: "empty", Names: []string{"."}, Local: local})
		if err != nil || res.Entries != 0 {
			t.Fatalf("%+v, %v", res, err)
		}
		if got := listDir(t, local); len(got) != 0 {
			t.Errorf("local holds %q", got)
		}
	})
}

func TestGetCompression(t *testing.T) {
	c, ws := inProcess(t)
	total := compressible(t, filepath.Join(ws, "text"))
	for _, mode := range []frame.Mode{frame.Auto, frame.Zstd, frame.None} {
		t.Run(mode.String(), func(t *testing.T) {
			local := filepath.Join(t.TempDir(), "out")
			res, err := c.Get(context.Background(), agent.GetSpec{Dir: "text", Names: []string{"."}, Local: local, Compress: mode})
			if err != nil {
				t.Fatal(err)
			}
			transfertest.EqualTrees(t, filepath.Join(ws, "text"), local)
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

func TestGetRefusals(t *testing.T) {
	c, ws := inProcess(t)
	mustFile(t, filepath.Join(ws, "dir", "f"), "f")
	mustFile(t, filepath.Join(ws, "file"), "file")
	sock := filepath.Join(ws, "sockdir", "s")
	if err := os.Mkdir(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	if l, err := net.Listen("unix", sock); err == nil {
		defer l.Close()
	} else {
		t.Logf("no unix socket: %v", err)
	}
	for _, tc := range []struct {
		name     string
		spec     agent.GetSpec
		sentinel error
		remote   bool   // the agent refused
		msg      string // in the error
	}{
		{"missing name", agent.GetSpec{Dir: "dir", Names: []string{"f", "nope"}}, fs.ErrNotExist, true, "nope"},
		{"missing dir", agent.GetSpec{Dir: "nodir", Names: []string{"."}}, fs.ErrNotExist, true, "nodir"},
		{"dir is a file", agent.GetSpec{Dir: "file", Names: []string{"."}}, syscall.ENOTDIR, true, "file"},
		{"socket", agent.GetSpec{Dir: "sockdir", Names: []string{"."}}, archive.ErrUnsupported, true, "sockdir/s"},
		{"name out of dir", agent.GetSpec{Dir: "dir", Names: []string{"../file"}}, agent.ErrInvalidPath, false, "../file"},
		{"no names", agent.GetSpec{Dir: "dir"}, agent.ErrInvalidPath, false, "dir"},
		{"newline", agent.GetSpec{Dir: "dir", Names: []string{"a\nb"}}, agent.ErrInvalidPath, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "socket" {
				if _, err := os.Lstat(sock); err != nil {
					t.Skip("no unix socket")
				}
			}
			local := filepath.Join(t.TempDir(), "out")
			tc.spec.Local = local
			_, err := c.Get(context.Background(), tc.spec)
			if !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v naming %q", err, tc.sentinel, tc.msg)
			}
			var re *agent.RemoteError
			if errors.As(err, &re) != tc.remote {
				t.Errorf("err = %v (%T): remote %v", err, err, !tc.remote)
			}
			if got := listDir(t, filepath.Dir(local)); got != nil {
				t.Errorf("local side holds %q", got)
			}
		})
	}
}

// getFake is an agent whose Get sends what send sends.
type getFake struct {
	agentv1.UnimplementedAgentServer
	send func(stream agentv1.Agent_GetServer) error
}

func (f *getFake) Get(_ *agentv1.GetRequest, stream agentv1.Agent_GetServer) error {
	return f.send(stream)
}

// getMsgs are the messages of a hostile Get: data, then a trailer unless
// nil, then extra data.
func getMsgs(data []byte, tr *agentv1.Trailer, after []byte) func(agentv1.Agent_GetServer) error {
	return func(stream agentv1.Agent_GetServer) error {
		for _, c := range chunks(data, 64<<10) {
			if err := stream.Send(&agentv1.GetResponse{Msg: &agentv1.GetResponse_Data{Data: c}}); err != nil {
				return err
			}
		}
		if tr != nil {
			if err := stream.Send(&agentv1.GetResponse{Msg: &agentv1.GetResponse_Trailer{Trailer: tr}}); err != nil {
				return err
			}
		}
		if after != nil {
			return stream.Send(&agentv1.GetResponse{Msg: &agentv1.GetResponse_Data{Data: after}})
		}
		return nil
	}
}

// TestGetHostileAgent runs Get against agents that send what an honest one
// never does: each is an error naming the entry where there is one, and
// nothing is placed.
func TestGetHostileAgent(t *testing.T) {
	fr := func(b []byte) []byte { return framed(t, b, frame.WriterOptions{}) }
	good, goodTr := makeTar(t, tarEntry{name: "d/", typ: '5'}, tarEntry{name: "d/a", data: "alpha"}, tarEntry{name: "b", data: "beta"})
	tamper := func(f func(tr *agentv1.Trailer)) *agentv1.Trailer {
		tr := proto.Clone(goodTr).(*agentv1.Trailer)
		f(tr)
		return tr
	}
	dotdot, dotdotTr := makeTar(t, tarEntry{name: "ok", data: "ok"}, tarEntry{name: "../x", data: "x"})
	abs, absTr := makeTar(t, tarEntry{name: "/etc/x", data: "x"})
	esc, escTr := makeTar(t, tarEntry{name: "l", typ: '2', link: "../../../outside"})
	chain, chainTr := makeTar(t, tarEntry{name: "b", typ: '2', link: "."}, tarEntry{name: "a", typ: '2', link: "b/../x"})
	through, throughTr := makeTar(t, tarEntry{name: "l", typ: '2', link: "."}, tarEntry{name: "l/f", data: "f"})
	dev, devTr := makeTar(t, tarEntry{name: "null", typ: '3'})
	empty, emptyTr := makeTar(t)
	zeros := make([]byte, 4<<20)
	bomb, bombTr := makeTar(t, tarEntry{name: "zeros", data: string(zeros)})
	goodFr := fr(good)
	corrupt := slices.Clone(goodFr)
	corrupt[len(corrupt)-10] ^= 1 // inside the frame trailer's digest
	statusErr := func(code codes.Code, reason, entry, msg string) error {
		st, _ := status.New(code, msg).WithDetails(&errdetails.ErrorInfo{Domain: "ferry.agent.v1", Reason: reason, Metadata: map[string]string{"entry": entry}})
		return st.Err()
	}
	for _, tc := range []struct {
		name     string
		names    []string
		send     func(agentv1.Agent_GetServer) error
		limits   archive.Limits
		sentinel error
		entry    string
	}{
		{name: "dot-dot", send: getMsgs(fr(dotdot), dotdotTr, nil), sentinel: archive.ErrUnsafePath, entry: "../x"},
		{name: "absolute", send: getMsgs(fr(abs), absTr, nil), sentinel: archive.ErrUnsafePath, entry: "/etc/x"},
		{name: "symlink escape", send: getMsgs(fr(esc), escTr, nil), sentinel: archive.ErrLinkEscape, entry: "l"},
		{name: "symlink chain escape", send: getMsgs(fr(chain), chainTr, nil), sentinel: archive.ErrLinkEscape, entry: "a"},
		{name: "write through a symlink", send: getMsgs(fr(through), throughTr, nil), sentinel: archive.ErrUnsafePath, entry: "l/f"},
		{name: "device", send: getMsgs(fr(dev), devTr, nil), sentinel: archive.ErrUnsupported, entry: "null"},
		{name: "digest mismatch", send: getMsgs(goodFr, tamper(func(tr *agentv1.Trailer) { tr.Files[1].Digest[0] ^= 1 }), nil), sentinel: archive.ErrDigest, entry: "b"},
		{name: "short digest", send: getMsgs(goodFr, tamper(func(tr *agentv1.Trailer) { tr.Files[0].Digest = nil }), nil), sentinel: archive.ErrDigest, entry: "d/a"},
		{name: "size mismatch", send: getMsgs(goodFr, tamper(func(tr *agentv1.Trailer) { tr.Files[0].Size = 4 }), nil), sentinel: archive.ErrDigest, entry: "d/a"},
		{name: "file not in trailer", send: getMsgs(goodFr, tamper(func(tr *agentv1.Trailer) { tr.Files = tr.Files[:1] }), nil), sentinel: archive.ErrDigest, entry: "b"},
		{name: "renamed in trailer", send: getMsgs(goodFr, tamper(func(tr *agentv1.Trailer) { tr.Files[1].Name = "c" }), nil), sentinel: archive.ErrDigest, entry: "b"},
		{name: "more counted", send: getMsgs(goodFr, tamper(func(tr *agentv1.Trailer) { tr.Entries++ }), nil), sentinel: archive.ErrShort},
		{name: "fewer counted", send: getMsgs(goodFr, tamper(func(tr *agentv1.Trailer) { tr.Entries-- }), nil), sentinel: archive.ErrDigest},
		{name: "bytes differ", send: getMsgs(goodFr, tamper(func(tr *agentv1.Trailer) { tr.Bytes-- }), nil), sentinel: archive.ErrDigest},
		{name: "no trailer", send: getMsgs(goodFr, nil, nil), sentinel: archive.ErrTruncated},
		{name: "data after the trailer", send: getMsgs(goodFr, goodTr, []byte("x")), sentinel: archive.ErrDigest},
		{name: "data after the frame", send: getMsgs(append(slices.Clone(goodFr), 1, 2, 3), goodTr, nil), sentinel: archive.ErrDigest},
		{name: "data after the archive", send: getMsgs(fr(append(slices.Clone(good), 7)), goodTr, nil), sentinel: archive.ErrDigest},
		{name: "frame cut before its trailer", send: getMsgs(goodFr[:len(goodFr)-53], goodTr, nil), sentinel: archive.ErrTruncated},
		{name: "frame cut in a block", send: getMsgs(goodFr[:len(goodFr)/2], goodTr, nil), sentinel: archive.ErrTruncated},
		{name: "frame cut, no trailer", send: getMsgs(goodFr[:len(goodFr)/2], nil, nil), sentinel: archive.ErrTruncated},
		{name: "frame trailer corrupt", send: getMsgs(corrupt, goodTr, nil), sentinel: archive.ErrDigest},
		{name: "not a frame stream", send: getMsgs(good, goodTr, nil), sentinel: frame.ErrCorrupt},
		{name: "nothing where a name was asked", names: []string{"x"}, send: getMsgs(fr(empty), emptyTr, nil), sentinel: archive.ErrShort},
		{name: "over the ratio", send: getMsgs(framed(t, bomb, frame.WriterOptions{Compress: frame.Zstd, MaxRatio: 1 << 20}), bombTr, nil), sentinel: frame.ErrLimit},
		{name: "over a limit", limits: archive.Limits{MaxTotalBytes: 6}, send: getMsgs(goodFr, goodTr, nil), sentinel: archive.ErrLimit, entry: "b"},
		{name: "empty data message", send: getMsgs(nil, nil, []byte{}), sentinel: archive.ErrDigest},
		// An honest agent sends only what was asked for, and never a
		// sparse file, which would become 2 GiB of zeros on the host.
		{name: "unrequested name", names: []string{"d"}, send: getMsgs(goodFr, goodTr, nil), sentinel: archive.ErrUnrequested, entry: "b"},
		{name: "unrequested name beside a file", names: []string{"d/a"}, send: getMsgs(goodFr, goodTr, nil), sentinel: archive.ErrUnrequested, entry: "d/"},
		{name: "gnu sparse", send: getMsgs(fr(fixture(t, "sparse-gnu")), emptyTr, nil), sentinel: archive.ErrUnsupported, entry: "sparse"},
		{name: "pax sparse 0.0", send: getMsgs(fr(fixture(t, "sparse-pax-0.0")), emptyTr, nil), sentinel: archive.ErrUnsupported, entry: "sparse"},
		{name: "pax sparse 0.1", send: getMsgs(fr(fixture(t, "sparse-pax-0.1")), emptyTr, nil), sentinel: archive.ErrUnsupported, entry: "sparse"},
		{name: "pax sparse 1.0", send: getMsgs(fr(fixture(t, "sparse-pax-1.0")), emptyTr, nil), sentinel: archive.ErrUnsupported, entry: "sparse"},
		{name: "refusal with a reason", send: func(agentv1.Agent_GetServer) error {
			return statusErr(codes.InvalidArgument, "LINK_ESCAPE", "evil", "get: symlink \"evil\" escapes")
		}, sentinel: archive.ErrUnsafePath, entry: "evil"},
		{name: "refusal after data", send: func(s agentv1.Agent_GetServer) error {
			getMsgs(goodFr[:100], nil, nil)(s)
			return statusErr(codes.DataLoss, "SHORT", "", "the file shrank")
		}, sentinel: archive.ErrShort},
		{name: "bare status", send: func(agentv1.Agent_GetServer) error { return status.Error(codes.NotFound, "gone") }, sentinel: fs.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeAgent(t, &getFake{send: tc.send})
			parent := t.TempDir()
			names := tc.names
			if names == nil {
				names = []string{"."}
			}
			_, err := c.Get(context.Background(), agent.GetSpec{Dir: "d", Names: names, Local: filepath.Join(parent, "out"), Limits: tc.limits})
			t.Log(err)
			wantEntryErr(t, err, tc.sentinel, tc.entry)
			if got := listDir(t, parent); got != nil {
				t.Errorf("local side holds %q", got)
			}
		})
	}
	t.Run("honest", func(t *testing.T) {
		c := fakeAgent(t, &getFake{send: getMsgs(goodFr, goodTr, nil)})
		local := filepath.Join(t.TempDir(), "out")
		res, err := c.Get(context.Background(), agent.GetSpec{Dir: "d", Names: []string{"d", "b"}, Local: local})
		if err != nil || res.Files != 2 || res.Dirs != 1 || res.Bytes != 9 {
			t.Fatalf("%+v, %v", res, err)
		}
	})
}

func TestGetCancel(t *testing.T) {
	started := make(chan struct{})
	c := fakeAgent(t, &getFake{send: func(s agentv1.Agent_GetServer) error {
		getMsgs(framed(t, []byte("not yet a whole block of tar"), frame.WriterOptions{})[:20], nil, nil)(s)
		close(started)
		<-s.Context().Done()
		return s.Context().Err()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	parent := t.TempDir()
	_, err := c.Get(ctx, agent.GetSpec{Dir: "d", Names: []string{"x"}, Local: filepath.Join(parent, "out")})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if got := listDir(t, parent); got != nil {
		t.Errorf("local side holds %q", got)
	}
}

// fixture is one of the hostile archives of ../../testdata/archives
// (transfer's fixtures_test.go makes them).
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "archives", name+".tar"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestGetFilesOnly: with FilesOnly, the names that are regular files come
// and the rest (missing, a directory, a symlink) are left out without an
// error, as is everything of a missing dir; without it, each is refused
// as before (TestGetRefusals).
func TestGetFilesOnly(t *testing.T) {
	c, ws := inProcess(t)
	mustFile(t, filepath.Join(ws, "meta", "meta.json"), "{}")
	mustFile(t, filepath.Join(ws, "meta", "runner.log"), "log")
	mustFile(t, filepath.Join(ws, "meta", "sub", "deep"), "d")
	if err := os.Symlink("meta.json", filepath.Join(ws, "meta", "link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir string
		want      []string
	}{
		{"some files", "meta", []string{"meta.json", "runner.log"}},
		{"missing dir", "nodir", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local := t.TempDir()
			_, err := c.Get(context.Background(), agent.GetSpec{Dir: tc.dir, Names: []string{"meta.json", "absent", "sub", "link", "runner.log"},
				Local: local, Place: archive.PlaceInto, FilesOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			ents, _ := os.ReadDir(local)
			for _, e := range ents {
				got = append(got, e.Name())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
