package agent_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/agent/server"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// inProcess is an agent serving a fresh workspace, and that workspace.
func inProcess(t *testing.T) (*agent.Client, string) {
	t.Helper()
	ws := t.TempDir()
	c := agenttest.InProcess(t, server.Config{Workspace: ws})
	// Connect now: a client that never made a call cannot be closed
	// (agenttest.InProcess waits for a server blocked on its first write).
	if _, err := c.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, ws
}

// fakeAgent serves impl as the agent; see agenttest.Fake.
func fakeAgent(t *testing.T, impl agentv1.AgentServer) *agent.Client {
	return agenttest.Fake(t, impl)
}

// tarEntry is one entry of a hand-made archive.
type tarEntry struct {
	name, data, link string
	typ              byte
}

// makeTar writes entries as a tar stream and returns it with the trailer an
// honest sender would send for it.
func makeTar(t *testing.T, entries ...tarEntry) ([]byte, *agentv1.Trailer) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tr := &agentv1.Trailer{}
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644, Linkname: e.link, Size: int64(len(e.data)), Format: tar.FormatPAX}
		if e.typ == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.Typeflag == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.data)); err != nil {
				t.Fatal(err)
			}
		}
		tr.Entries++
		if h.Typeflag == tar.TypeReg {
			sum := archive.DigestOf([]byte(e.data))
			tr.Bytes += h.Size
			tr.Files = append(tr.Files, &agentv1.FileDigest{Name: filepath.Clean(e.name), Size: h.Size, Digest: sum[:]})
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), tr
}

// treeTar is the archive archive.Writer makes of dir's contents, with its
// trailer.
func treeTar(t *testing.T, dir string) ([]byte, *agentv1.Trailer) {
	t.Helper()
	return treeArchive(t, dir, archive.FormatTar)
}

// treeArchive is treeTar in format f.
func treeArchive(t *testing.T, dir string, f archive.Format) ([]byte, *agentv1.Trailer) {
	t.Helper()
	var buf bytes.Buffer
	w := archive.NewWriterFormat(&buf, f)
	w.HashFiles()
	if err := w.Add(context.Background(), dir, "."); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	tr := &agentv1.Trailer{Entries: st.Files + st.Dirs + st.Symlinks, Bytes: st.Bytes}
	for _, d := range w.Digests() {
		tr.Files = append(tr.Files, &agentv1.FileDigest{Name: d.Name, Size: d.Size, Digest: bytes.Clone(d.Sum[:])})
	}
	return buf.Bytes(), tr
}

// framed is data as a frame stream.
func framed(t *testing.T, data []byte, opts frame.WriterOptions) []byte {
	t.Helper()
	var buf bytes.Buffer
	fw := frame.NewWriter(&buf, opts)
	if _, err := fw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// chunks cuts b into data messages of at most n bytes.
func chunks(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		k := min(n, len(b))
		out = append(out, b[:k])
		b = b[k:]
	}
	return out
}

// statusReason is the gRPC code of err and the agent's ErrorInfo in it.
func statusReason(err error) (codes.Code, string, string) {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), info.GetReason(), info.GetMetadata()["entry"]
		}
	}
	return st.Code(), "", ""
}

// listDir is what dir holds, sorted; nil if it does not exist, and
// ["<file>"] if it is not a directory.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	if fi, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err == nil && !fi.IsDir() {
		return []string{"<file>"}
	}
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// mustFile writes a file, making its parents.
func mustFile(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// wantEntryErr fails t unless err matches sentinel and, when entry is
// set, names it as an *archive.EntryError or *agent.RemoteError.
func wantEntryErr(t *testing.T, err, sentinel error, entry string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("err = %v, want %v", err, sentinel)
	}
	if entry == "" {
		return
	}
	var ee *archive.EntryError
	var re *agent.RemoteError
	switch {
	case errors.As(err, &ee):
		if ee.Entry != entry {
			t.Fatalf("err = %v names %q, want %q", err, ee.Entry, entry)
		}
	case errors.As(err, &re):
		if re.Entry != entry {
			t.Fatalf("err = %v names %q, want %q", err, re.Entry, entry)
		}
	default:
		t.Fatalf("err = %v (%T) names no entry, want %q", err, err, entry)
	}
}
