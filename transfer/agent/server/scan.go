package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ferry-dev/ferry/internal/fdfile"
	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/cdc"
)

// Bounds of a Scan and a ReadChunks call.
const (
	// maxKnown bounds ScanRequest.known.
	maxKnown = 1 << 20
	// maxFileChunks bounds one file's chunk list, which travels in one
	// ScanEntry: about 50 bytes a chunk keeps an entry well under
	// maxMessage. At the default 32 KiB average that is files of about
	// 32 GiB; a larger file fails the scan with ErrLimit.
	maxFileChunks = 1 << 20
	// scanBatch is the size a ScanResponse grows to before it is sent:
	// thousands of entries, a few times as much in memory at each end.
	scanBatch = 256 << 10
	// maxInline bounds the chunk bytes a scan sends inline, whatever the
	// host asks.
	maxInline = 8 << 20
)

// inline is what a scan may still send of chunks inline, and how.
type inline struct {
	left int64
	comp agentv1.Compression
	z    []byte
}

// newInline is the inline budget req asks for.
func newInline(req *agentv1.ScanRequest) (*inline, error) {
	comp := req.GetInlineCompression()
	if _, ok := agentv1.Compression_name[int32(comp)]; !ok {
		return nil, status.Errorf(codes.InvalidArgument, "scan: unknown inline compression %v", comp)
	}
	return &inline{left: min(max(req.GetInlineBytes(), 0), maxInline), comp: comp}, nil
}

// attach puts data, the chunk c of a file whose known size is known (-1:
// the host knows none), in c when the budget allows and the host cannot
// hold it already: a new file's, or one past the known size (an append's
// new content, the last chunk before it cut again).
func (in *inline) attach(c *agentv1.ChunkInfo, data []byte, known int64) {
	if in == nil || int64(len(data)) > in.left || c.GetOffset()+c.GetSize() <= known {
		return
	}
	in.left -= int64(len(data))
	if in.comp != agentv1.Compression_COMPRESSION_NONE {
		in.z = wire.ChunkEncoder.EncodeAll(data, in.z[:0])
		if in.comp == agentv1.Compression_COMPRESSION_ZSTD || len(in.z)*100 <= len(data)*zstdKeep {
			c.Data, c.Zstd = bytes.Clone(in.z), true
			return
		}
	}
	c.Data = bytes.Clone(data)
}

// Scan walks req.dir as session.DirSource walks a local directory, so that
// a save through the agent and one of the same tree on the host give the
// same manifest: fs.WalkDir over an os.Root (lexical order, a directory
// before its contents, symlinks reported and never followed), the root
// itself not reported. Sockets, FIFOs and devices are skipped, not
// reported: a session cannot carry them. A regular file is read once,
// through the root and without following a final symlink, cut by the
// chunker and each chunk hashed with SHA-256; its mode and mtime then come
// from the open file. A regular file whose lstat size and mtime equal a
// known file's is reported unchanged and not opened.
func (s *server) Scan(req *agentv1.ScanRequest, stream agentv1.Agent_ScanServer) error {
	if len(req.GetKnown()) > maxKnown {
		return wire.ToStatus(fmt.Errorf("scan %s: %w: %d known files, at most %d", req.GetDir(), archive.ErrLimit, len(req.GetKnown()), maxKnown))
	}
	// The last of a path known twice counts, as a map of them would have it.
	known := slices.Clone(req.GetKnown())
	slices.SortStableFunc(known, func(a, b *agentv1.KnownFile) int { return archive.CompareWalk(a.GetPath(), b.GetPath()) })
	for i := len(known) - 1; i > 0; i-- {
		if known[i-1].GetPath() == known[i].GetPath() {
			known = slices.Delete(known, i-1, i)
		}
	}
	k := &knownFiles{}
	if err := k.add(known); err != nil {
		return wire.ToStatus(err)
	}
	return wire.ToStatus(s.scan(stream.Context(), req, k, nil, stream.Send))
}

// ScanStream is Scan with the known files streamed in walk order: the agent
// holds one batch of them at a time, and reads the next as its walk gets
// there.
func (s *server) ScanStream(stream agentv1.Agent_ScanStreamServer) error {
	req, err := stream.Recv()
	if err == io.EOF {
		return status.Error(codes.InvalidArgument, "scan: no request")
	}
	if err != nil {
		return err
	}
	k := &knownFiles{recv: stream.Recv}
	if err := k.add(req.GetKnown()); err != nil {
		return wire.ToStatus(err)
	}
	in, err := newInline(req)
	if err != nil {
		return err
	}
	return wire.ToStatus(s.scan(stream.Context(), req, k, in, stream.Send))
}

func (s *server) scan(ctx context.Context, req *agentv1.ScanRequest, known *knownFiles, in *inline, send func(*agentv1.ScanResponse) error) error {
	rd := req.GetDir()
	if rd == "" {
		rd = "."
	}
	if err := wire.CheckRemotePath("scan", rd); err != nil {
		return err
	}
	p, err := chunkParams(req.GetParams())
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "scan %s: %v", rd, err)
	}
	dir := s.abs(rd)
	root, err := openRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()

	op := &fileOpener{dir: fdfile.HeldDir{Root: root}}
	defer op.close()
	ch := cdc.New(nil, p)
	resp := &agentv1.ScanResponse{}
	size := 0
	flush := func() error {
		if len(resp.Entries) == 0 {
			return nil
		}
		err := send(resp)
		resp.Entries, size = resp.Entries[:0], 0
		return err
	}
	err = fs.WalkDir(root.FS(), ".", func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		e := &agentv1.ScanEntry{Path: p, Mode: unixMode(fi.Mode()), MtimeUnixNano: fi.ModTime().UnixNano()}
		switch m := fi.Mode(); {
		case m.IsDir():
			e.Kind = agentv1.Kind_KIND_DIR
		case m&fs.ModeSymlink != 0:
			e.Kind = agentv1.Kind_KIND_SYMLINK
			if e.Target, err = root.Readlink(p); err != nil {
				return err
			}
		case m.IsRegular():
			e.Kind = agentv1.Kind_KIND_FILE
			k, err := known.find(p)
			if err != nil {
				return fmt.Errorf("scan %s: %w", rd, err)
			}
			knownSize := int64(-1)
			if k != nil {
				knownSize = k.GetSize()
			}
			if k != nil && k.GetSize() == fi.Size() && k.GetMtimeUnixNano() == e.MtimeUnixNano {
				e.Size, e.Unchanged = fi.Size(), true
			} else if err := chunkFile(ctx, op, ch, e, in, knownSize); err != nil {
				return &fs.PathError{Op: "scan", Path: filepath.Join(dir, p), Err: err}
			}
		default:
			return nil
		}
		resp.Entries = append(resp.Entries, e)
		if size += proto.Size(e); size >= scanBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return err
}

// knownFiles are the host's known files, in walk order, read as the walk
// reaches them: a Scan's whole list, sorted, or a ScanStream's batches,
// received one at a time. A list out of order (the walk would miss files
// in it) or over maxKnown is refused.
type knownFiles struct {
	batch []*agentv1.KnownFile
	recv  func() (*agentv1.ScanRequest, error) // the next batch; nil for none
	last  string
	n     int
}

// add takes the next batch, checking its order.
func (k *knownFiles) add(batch []*agentv1.KnownFile) error {
	for _, f := range batch {
		if k.n > 0 && archive.CompareWalk(k.last, f.GetPath()) >= 0 {
			return status.Errorf(codes.InvalidArgument, "known file %q: out of walk order, after %q", f.GetPath(), k.last)
		}
		if k.n++; k.n > maxKnown {
			return fmt.Errorf("%w: over %d known files", archive.ErrLimit, maxKnown)
		}
		k.last = f.GetPath()
	}
	k.batch = batch
	return nil
}

// find returns the known file at path, nil if there is none, and drops
// every one before it. Paths come in ascending walk order.
func (k *knownFiles) find(path string) (*agentv1.KnownFile, error) {
	for {
		for len(k.batch) > 0 {
			f := k.batch[0]
			switch c := archive.CompareWalk(f.GetPath(), path); {
			case c > 0:
				return nil, nil
			case c == 0:
				k.batch = k.batch[1:]
				return f, nil
			}
			k.batch = k.batch[1:]
		}
		if k.recv == nil {
			return nil, nil
		}
		req, err := k.recv()
		if err == io.EOF {
			k.recv = nil
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := k.add(req.GetKnown()); err != nil {
			return nil, err
		}
	}
}

// chunkFile reads the file e.Path once and fills in e's chunks and size,
// and its mode and mtime from the open file; in attaches the chunks it
// takes (known is the size the host knows the file at, -1 for none).
func chunkFile(ctx context.Context, op *fileOpener, ch *cdc.Chunker, e *agentv1.ScanEntry, in *inline, known int64) error {
	f, err := op.open(e.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	regular, mode, mtime, err := f.stat()
	if err != nil {
		return err
	}
	if !regular {
		return errors.New("changed type while scanning")
	}
	e.Mode, e.MtimeUnixNano = mode, mtime.UnixNano()
	ch.Reset(f)
	for {
		data, err := ch.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(e.Chunks) == maxFileChunks {
			return fmt.Errorf("%w: over %d chunks", archive.ErrLimit, maxFileChunks)
		}
		sum := sha256.Sum256(data)
		c := &agentv1.ChunkInfo{Id: sum[:], Offset: e.Size, Size: int64(len(data))}
		in.attach(c, data, known)
		e.Chunks = append(e.Chunks, c)
		e.Size += int64(len(data))
	}
}

// chunkParams is the chunker a ScanRequest asks for: all zero is
// cdc.Default().
func chunkParams(cp *agentv1.ChunkParams) (cdc.Params, error) {
	if cp.GetMin() == 0 && cp.GetAvg() == 0 && cp.GetMax() == 0 {
		return cdc.Default(), nil
	}
	p := cdc.Params{Min: int(cp.GetMin()), Avg: int(cp.GetAvg()), Max: int(cp.GetMax())}
	if err := p.Validate(); err != nil {
		return p, err
	}
	if p.Max > wire.MaxChunk {
		return p, fmt.Errorf("chunk params: max %d over %d", p.Max, wire.MaxChunk)
	}
	return p, nil
}

// openRoot is os.OpenRoot, whose error for a path that is not a
// directory is a bare "not a directory" text: here it is syscall.ENOTDIR,
// which the host tells apart (a save of a file is transfer.ErrNotDir).
func openRoot(dir string) (*os.Root, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		if fi, serr := os.Stat(dir); serr == nil && !fi.IsDir() {
			return nil, &fs.PathError{Op: "open", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil, err
	}
	return root, nil
}
