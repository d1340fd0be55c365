// Package hostile is ferry's agent turned against its host: the agent a
// sandbox that turned hostile would run in ferry's place. It speaks
// ferry.agent.v1 correctly (the real agent answers wherever it does not
// lie) and claims to be the build the host installs, so the host talks to
// it as to its own; what it lies about is a Scenario. Plant puts it where
// the serve script finds ferry's cached agent, so a test drives it through
// the real path: CLI, gateway, exec channel, sandbox and back.
package hostile

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// Scenario is what the hostile agent lies about. The zero value lies
// about nothing: the agent then behaves as ferry's own.
type Scenario struct {
	// Digest is the build the agent claims to be, hex: the host's own, so
	// that the host takes it for the agent it installed.
	Digest string `json:"digest"`

	// GetExtra are names every Get sends beside the ones asked for, taken
	// from the same directory by the real agent: a consistent stream, its
	// trailer and digests included, that carries names nobody asked for.
	GetExtra []string `json:"get_extra,omitempty"`
	// GetArchive is a tar file sent, framed, as every Get's stream, with a
	// trailer that counts nothing.
	GetArchive string `json:"get_archive,omitempty"`
	// GetStall makes every Get send the first message of its stream and
	// then nothing, until the host goes away.
	GetStall bool `json:"get_stall,omitempty"`

	// PutStall makes Put and Restore stop reading after their first
	// message, until the host goes away.
	PutStall bool `json:"put_stall,omitempty"`
	// PutLie makes Put and Restore, once the real agent has placed the
	// tree, report one file more than it wrote.
	PutLie bool `json:"put_lie,omitempty"`

	// Claims replace the chunk lists of scanned files: the agent says the
	// file holds these chunks (of another key, say), whatever it holds.
	Claims []Claim `json:"claims,omitempty"`
	// Repeats make a scanned file's first chunk stand for the whole file,
	// Count times over: a huge file, or a manifest bomb, from one chunk the
	// agent can show.
	Repeats []Repeat `json:"repeats,omitempty"`
	// Extra are entries the scan reports after the real ones (their paths
	// must sort after every real path: "~" begins the last names).
	Extra []Entry `json:"extra,omitempty"`
	// Omit are paths the scan leaves out, as if they did not exist.
	Omit []string `json:"omit,omitempty"`
	// ScanStall makes every scan send nothing, until the host goes away.
	ScanStall bool `json:"scan_stall,omitempty"`
	// ZstdWindow, when set, makes ReadChunks and the scan's inline chunks
	// come as one zstd frame each whose header asks for a window this
	// large.
	ZstdWindow int `json:"zstd_window,omitempty"`
	// NoInline makes the scan drop the chunks it was asked to send
	// inline, as an agent that does not know the field would, so that the
	// host fetches them.
	NoInline bool `json:"no_inline,omitempty"`

	// Log, when set, is a file the agent appends each ReadChunks read to,
	// one "path offset size id" line each: what the host asked to see.
	Log string `json:"log,omitempty"`
}

// Claim is a scanned file reported with chunks it may not hold.
type Claim struct {
	Path   string  `json:"path"`
	Chunks []Chunk `json:"chunks"`
}

// Chunk is one chunk of a claim: its id (hex) and size.
type Chunk struct {
	ID   string `json:"id"`
	Size int64  `json:"size"`
}

// Repeat reports file Path as Count copies of its first chunk, or as
// many as it takes to reach Size bytes.
type Repeat struct {
	Path  string `json:"path"`
	Count int64  `json:"count,omitempty"`
	Size  int64  `json:"size,omitempty"`
}

// Entry is an entry the scan adds: kind "file", "dir" or "symlink".
type Entry struct {
	Path   string  `json:"path"`
	Kind   string  `json:"kind"`
	Mode   uint32  `json:"mode"`
	Target string  `json:"target,omitempty"`
	Size   int64   `json:"size,omitempty"`
	Chunks []Chunk `json:"chunks,omitempty"`
}

// Load reads the scenario at path.
func Load(path string) (Scenario, error) {
	var s Scenario
	b, err := os.ReadFile(path)
	if err != nil {
		return s, fmt.Errorf("load scenario: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("load scenario %s: %w", path, err)
	}
	return s, nil
}

// ClaimedDigest is the digest the hello carries.
func (s Scenario) ClaimedDigest() ([32]byte, error) {
	var d [32]byte
	b, err := hex.DecodeString(s.Digest)
	if err != nil || len(b) != len(d) {
		return d, fmt.Errorf("scenario digest %q: want 64 hex digits", s.Digest)
	}
	copy(d[:], b)
	return d, nil
}

// Wrap returns the server.Config.Wrap that answers as s says.
func (s Scenario) Wrap() func(agentv1.AgentServer) agentv1.AgentServer {
	return func(real agentv1.AgentServer) agentv1.AgentServer { return &server{AgentServer: real, s: s} }
}

// stallMax bounds every stall: a test that forgot to end one still ends.
const stallMax = 2 * time.Minute

func stall(ctx context.Context) error {
	t := time.NewTimer(stallMax)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("hostile agent: stall of %v over", stallMax)
	}
}

type server struct {
	agentv1.AgentServer
	s Scenario
}

func (h *server) Get(req *agentv1.GetRequest, stream agentv1.Agent_GetServer) error {
	switch {
	case h.s.GetArchive != "":
		return sendArchive(h.s.GetArchive, stream)
	case h.s.GetStall:
		return h.AgentServer.Get(req, &stallingGet{ServerStream: stream, send: stream.Send})
	case len(h.s.GetExtra) > 0:
		req.Names = append(req.Names, h.s.GetExtra...)
	}
	return h.AgentServer.Get(req, stream)
}

// sendArchive sends the tar file at path as a Get stream would carry it.
func sendArchive(path string, stream agentv1.Agent_GetServer) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var framed bytes.Buffer
	fw := frame.NewWriter(&framed, frame.WriterOptions{Compress: frame.None, NoDigest: true})
	if _, err := fw.Write(b); err != nil {
		return err
	}
	if err := fw.Close(); err != nil {
		return err
	}
	for p := framed.Bytes(); len(p) > 0; {
		n := min(len(p), 64<<10)
		if err := stream.Send(&agentv1.GetResponse{Msg: &agentv1.GetResponse_Data{Data: p[:n]}}); err != nil {
			return err
		}
		p = p[n:]
	}
	return stream.Send(&agentv1.GetResponse{Msg: &agentv1.GetResponse_Trailer{Trailer: &agentv1.Trailer{}}})
}

// stallingGet passes the first message and then stalls.
type stallingGet struct {
	grpc.ServerStream
	send func(*agentv1.GetResponse) error
	sent bool
}

func (g *stallingGet) Send(m *agentv1.GetResponse) error {
	if g.sent {
		return stall(g.Context())
	}
	g.sent = true
	return g.send(m)
}

func (h *server) Put(stream agentv1.Agent_PutServer) error {
	return placeTree(h.s, stream, h.AgentServer.Put)
}

func (h *server) Restore(stream agentv1.Agent_RestoreServer) error {
	return placeTree(h.s, stream, h.AgentServer.Restore)
}

// treeStream is a Put's or a Restore's stream: requests in, the placed
// tree's stats out.
type treeStream[Req any] = grpc.ClientStreamingServer[Req, agentv1.PutResponse]

// placeTree answers a Put or a Restore as s says: the real agent's
// (real), a stall after the first request, or the real agent's with one
// file more counted than it placed.
func placeTree[Req any](s Scenario, stream treeStream[Req], real func(treeStream[Req]) error) error {
	switch {
	case s.PutStall:
		if _, err := stream.Recv(); err != nil {
			return err
		}
		return stall(stream.Context())
	case !s.PutLie:
		return real(stream)
	}
	held := &heldResponse[Req]{ClientStreamingServer: stream}
	if err := real(held); err != nil {
		return err
	}
	r := held.resp
	if r == nil {
		r = &agentv1.PutResponse{}
	}
	if r.Stats == nil {
		r.Stats = &agentv1.Stats{}
	}
	r.Stats.Files++
	return stream.SendAndClose(r)
}

// heldResponse keeps the real agent's response back, to be sent changed.
type heldResponse[Req any] struct {
	grpc.ClientStreamingServer[Req, agentv1.PutResponse]
	resp *agentv1.PutResponse
}

func (l *heldResponse[Req]) SendAndClose(r *agentv1.PutResponse) error {
	l.resp = r
	return nil
}

func (h *server) ScanStream(stream agentv1.Agent_ScanStreamServer) error {
	if h.s.ScanStall {
		return stall(stream.Context())
	}
	if len(h.s.Claims) == 0 && len(h.s.Repeats) == 0 && len(h.s.Extra) == 0 && len(h.s.Omit) == 0 && h.s.ZstdWindow == 0 && !h.s.NoInline {
		return h.AgentServer.ScanStream(stream)
	}
	rs := &rewritingScan{BidiStreamingServer: stream, s: h.s}
	if h.s.ZstdWindow != 0 {
		rw, err := newRewindower(h.s.ZstdWindow)
		if err != nil {
			return err
		}
		defer rw.close()
		rs.rw = rw
	}
	if err := h.AgentServer.ScanStream(rs); err != nil {
		return err
	}
	return rs.finish()
}

// rewritingScan rewrites the real scan's entries as the scenario says.
type rewritingScan struct {
	grpc.BidiStreamingServer[agentv1.ScanRequest, agentv1.ScanResponse]
	s  Scenario
	rw *rewindower // re-encodes inline chunks; nil: they pass as they are
}

func (r *rewritingScan) Send(m *agentv1.ScanResponse) error {
	kept := m.Entries[:0]
	for _, e := range m.GetEntries() {
		if !slices.Contains(r.s.Omit, e.GetPath()) {
			kept = append(kept, e)
		}
	}
	m.Entries = kept
	for _, e := range m.GetEntries() {
		for _, c := range e.GetChunks() {
			if r.s.NoInline {
				c.Data, c.Zstd = nil, false
			}
			if r.rw == nil || c.GetData() == nil {
				continue
			}
			data, err := r.rw.reencode(c.GetData(), c.GetZstd())
			if err != nil {
				return err
			}
			c.Data, c.Zstd = data, true
		}
		for _, c := range r.s.Claims {
			if e.GetPath() != c.Path {
				continue
			}
			e.Unchanged = false
			e.Chunks, e.Size = chunkInfos(c.Chunks)
		}
		for _, rp := range r.s.Repeats {
			if e.GetPath() != rp.Path || len(e.GetChunks()) == 0 {
				continue
			}
			first := e.GetChunks()[0]
			n := rp.Count
			if rp.Size > 0 {
				n = (rp.Size + first.GetSize() - 1) / first.GetSize()
			}
			e.Chunks = make([]*agentv1.ChunkInfo, n)
			for i := range e.Chunks {
				e.Chunks[i] = &agentv1.ChunkInfo{Id: first.GetId(), Offset: int64(i) * first.GetSize(), Size: first.GetSize()}
			}
			e.Size = n * first.GetSize()
		}
	}
	return r.BidiStreamingServer.Send(m)
}

// finish sends the extra entries, after every real one.
func (r *rewritingScan) finish() error {
	if len(r.s.Extra) == 0 {
		return nil
	}
	m := &agentv1.ScanResponse{}
	for _, x := range r.s.Extra {
		e := &agentv1.ScanEntry{Path: x.Path, Mode: x.Mode, MtimeUnixNano: time.Now().UnixNano(), Target: x.Target}
		switch x.Kind {
		case "dir":
			e.Kind = agentv1.Kind_KIND_DIR
		case "symlink":
			e.Kind = agentv1.Kind_KIND_SYMLINK
		default:
			e.Kind = agentv1.Kind_KIND_FILE
			e.Chunks, e.Size = chunkInfos(x.Chunks)
			if x.Size != 0 {
				e.Size = x.Size
			}
		}
		m.Entries = append(m.Entries, e)
	}
	return r.BidiStreamingServer.Send(m)
}

func chunkInfos(cs []Chunk) ([]*agentv1.ChunkInfo, int64) {
	var off int64
	out := make([]*agentv1.ChunkInfo, len(cs))
	for i, c := range cs {
		id, _ := hex.DecodeString(c.ID)
		out[i] = &agentv1.ChunkInfo{Id: id, Offset: off, Size: c.Size}
		off += c.Size
	}
	return out, off
}

func (h *server) ReadChunks(req *agentv1.ReadChunksRequest, stream agentv1.Agent_ReadChunksServer) error {
	if h.s.Log != "" {
		var b strings.Builder
		for _, rd := range req.GetReads() {
			fmt.Fprintf(&b, "%s %d %d %x\n", rd.GetPath(), rd.GetOffset(), rd.GetSize(), rd.GetId())
		}
		if err := appendFile(h.s.Log, b.String()); err != nil {
			return err
		}
	}
	// A read the scan made up (a repeat past the file's end, a claim) is
	// answered from the first bytes the file has, so the host gets bytes
	// to check rather than an error it might take for an honest change.
	for _, rd := range req.GetReads() {
		if fi, err := os.Stat(filepath.Join(req.GetDir(), filepath.FromSlash(rd.GetPath()))); err == nil && rd.GetOffset()+rd.GetSize() > fi.Size() {
			rd.Offset = 0
		}
	}
	if h.s.ZstdWindow == 0 {
		return h.AgentServer.ReadChunks(req, stream)
	}
	rw, err := newRewindower(h.s.ZstdWindow)
	if err != nil {
		return err
	}
	defer rw.close()
	return h.AgentServer.ReadChunks(req, &rewindowed{ServerStreamingServer: stream, rw: rw})
}

// rewindower re-encodes chunks as zstd frames that ask for its window.
type rewindower struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

func newRewindower(window int) (*rewindower, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithWindowSize(window), zstd.WithEncoderConcurrency(1), zstd.WithSingleSegment(false))
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderMaxWindow(1<<30), zstd.WithDecoderConcurrency(1))
	if err != nil {
		enc.Close()
		return nil, err
	}
	return &rewindower{enc: enc, dec: dec}, nil
}

func (r *rewindower) reencode(data []byte, compressed bool) ([]byte, error) {
	if compressed {
		var err error
		if data, err = r.dec.DecodeAll(data, nil); err != nil {
			return nil, err
		}
	}
	return r.enc.EncodeAll(data, nil), nil
}

func (r *rewindower) close() {
	r.enc.Close()
	r.dec.Close()
}

// rewindowed re-encodes every chunk ReadChunks sends.
type rewindowed struct {
	grpc.ServerStreamingServer[agentv1.ReadChunksResponse]
	rw *rewindower
}

func (r *rewindowed) Send(m *agentv1.ReadChunksResponse) error {
	data, err := r.rw.reencode(m.GetData(), m.GetZstd())
	if err != nil {
		return err
	}
	return r.ServerStreamingServer.Send(&agentv1.ReadChunksResponse{Index: m.GetIndex(), Data: data, Zstd: true})
}

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
