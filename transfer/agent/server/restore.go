package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// maxRestoreEntries bounds the entries a Restore header may announce: the
// agent holds them all while the chunks arrive.
const maxRestoreEntries = 1 << 20

func (s *server) Restore(stream agentv1.Agent_RestoreServer) error {
	st, err := s.restore(stream)
	if err != nil {
		return wire.ToStatus(err)
	}
	return stream.SendAndClose(&agentv1.PutResponse{Stats: st})
}

func (s *server) restore(stream agentv1.Agent_RestoreServer) (*agentv1.Stats, error) {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	first, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	h := first.GetHeader()
	if h == nil {
		return nil, status.Error(codes.InvalidArgument, "restore: the first message is not a header")
	}
	op := "restore " + h.GetDest()
	place, lim, err := destHeader("restore", h.GetDest(), h.GetPlace(), h.GetLimits())
	if err != nil {
		return nil, err
	}
	n := h.GetEntries()
	if n < 0 || n > maxRestoreEntries || (lim.MaxEntries > 0 && n > lim.MaxEntries+1) {
		return nil, fmt.Errorf("%s: %w: %d entries", op, archive.ErrLimit, n)
	}
	onWire := int64(proto.Size(first))
	entries := make([]*agentv1.RestoreEntry, 0, n)
	for int64(len(entries)) < n {
		m, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		onWire += int64(proto.Size(m))
		batch := m.GetEntries()
		if batch == nil || int64(len(entries)+len(batch.GetEntries())) > n {
			return nil, status.Errorf(codes.InvalidArgument, "%s: %d entries announced, another message or more entries arrived first", op, n)
		}
		entries = append(entries, batch.GetEntries()...)
	}
	if err := checkRestoreEntries(entries); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	dest := s.abs(h.GetDest())
	if err := prepareDest(dest, place); err != nil {
		return nil, err
	}

	// The tree is rebuilt as a tar stream and handed to the same extractor
	// Put uses, so that staging, placement, limits and the refusal of
	// escaping symlinks are Put's, not a second implementation of them.
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		chunks := startChunkPipe(ctx, stream.Recv, entries, h.GetStream())
		// Nothing may follow the last chunk, which is checked before the
		// archive's end is written: the extractor places the tree on it.
		werr = writeRestoreTree(ctx, pw, entries, chunks, chunks.end)
		onWire += chunks.stop()
		pw.CloseWithError(werr)
	}()
	xs, err := archive.Extract(ctx, pr, dest, archive.ExtractOptions{
		Limits:  lim,
		Place:   place,
		Staging: h.GetStaging(),
		OnStale: s.reportStale(stream, "restore", h.GetDest()),
	})
	if err != nil {
		// Unblock the writer, whose error (the stream's, or a bad chunk)
		// is the cause when there is one: not when it only reports the
		// pipe closed or the cancel here, which the extractor's error
		// caused.
		pr.CloseWithError(err)
		cancel()
		wg.Wait()
		ours := errors.Is(werr, err) || errors.Is(werr, context.Canceled) && stream.Context().Err() == nil
		if werr != nil && !ours {
			return nil, werr
		}
		return nil, err
	}
	pr.Close()
	wg.Wait()
	return &agentv1.Stats{Files: xs.Files, Dirs: xs.Dirs, Symlinks: xs.Symlinks, Bytes: xs.Bytes, WireBytes: onWire}, nil
}

// checkRestoreEntries refuses what the tar writer would write wrongly
// rather than refuse: a file whose chunks do not add up to its size, a
// chunk over the limit, chunks on something that is not a file.
func checkRestoreEntries(entries []*agentv1.RestoreEntry) error {
	for _, e := range entries {
		var sum int64
		for _, c := range e.GetChunks() {
			if c.GetSize() < 1 || c.GetSize() > wire.MaxChunk || len(c.GetId()) != sha256.Size {
				return &archive.EntryError{Entry: e.GetPath(), Err: fmt.Errorf("%w: bad chunk reference", archive.ErrUnsupported)}
			}
			sum += c.GetSize()
		}
		if e.GetKind() != agentv1.Kind_KIND_FILE && len(e.GetChunks()) > 0 || sum != e.GetSize() || e.GetSize() < 0 {
			return &archive.EntryError{Entry: e.GetPath(), Err: fmt.Errorf("%w: %d bytes of chunks for size %d", archive.ErrUnsupported, sum, e.GetSize())}
		}
		if e.GetMode()&^0o7777 != 0 {
			return &archive.EntryError{Entry: e.GetPath(), Err: fmt.Errorf("%w: mode %o", archive.ErrUnsupported, e.GetMode())}
		}
	}
	return nil
}

// writeRestoreTree writes entries as a tar stream to w, each file's
// content from the chunks that follow, in order; end is called before
// the archive's end is written.
func writeRestoreTree(ctx context.Context, w io.Writer, entries []*agentv1.RestoreEntry, chunks *chunkPipe, end func() error) error {
	tw := archive.NewWriter(w)
	for _, e := range entries {
		hdr := archive.Header{
			Name:    e.GetPath(),
			Mode:    fs.FileMode(e.GetMode() & 0o777),
			ModTime: time.Unix(0, e.GetMtimeUnixNano()),
			Size:    e.GetSize(),
			Target:  e.GetTarget(),
		}
		var r io.Reader
		switch e.GetKind() {
		case agentv1.Kind_KIND_DIR:
			hdr.Kind = archive.Dir
		case agentv1.Kind_KIND_SYMLINK:
			hdr.Kind = archive.Symlink
		case agentv1.Kind_KIND_FILE:
			hdr.Kind = archive.File
			chunks.reset(e)
			r = chunks
		default:
			return &archive.EntryError{Entry: e.GetPath(), Err: fmt.Errorf("%w: kind %v", archive.ErrUnsupported, e.GetKind())}
		}
		if err := tw.WriteEntry(ctx, hdr, r); err != nil {
			return err
		}
	}
	if err := end(); err != nil {
		return err
	}
	return tw.Close()
}

// chunkDepth is how many chunks a Restore decodes ahead of the tree's
// writer, in parallel: decoding and hashing a chunk costs about what
// writing it does, so the two overlap. It bounds the memory too: at most
// chunkDepth+1 chunks of at most wire.MaxChunk bytes.
const chunkDepth = 4

// decoded is one chunk of a Restore, decoded and checked, or the reason it
// is not; ready is closed once it is either.
type decoded struct {
	plain []byte
	buf   *[]byte // plain's storage, from wire.Buffers; nil after a failure
	err   error
	ready chan struct{}
}

// chunkPipe reads the chunk messages that follow a Restore's entries, in
// order, each decoded and checked against its id in a goroutine of its own
// before a byte of it is handed on; the file reader (Read) takes them in
// the same order.
type chunkPipe struct {
	cancel context.CancelFunc
	queue  chan *decoded // in stream order; the last one is the end check
	wg     sync.WaitGroup
	wire   int64 // bytes received, the receiver's until stop

	entry *agentv1.RestoreEntry
	next  int     // the entry's next chunk
	left  []byte  // what is not read of the current chunk
	cur   *[]byte // the current chunk's storage, back to wire.Buffers once read
}

// startChunkPipe starts receiving and decoding the chunks entries
// reference. stop ends it; no goroutine outlives stop.
func startChunkPipe(ctx context.Context, recv func() (*agentv1.RestoreRequest, error), entries []*agentv1.RestoreEntry, streamed bool) *chunkPipe {
	ctx, cancel := context.WithCancel(ctx)
	c := &chunkPipe{cancel: cancel, queue: make(chan *decoded, chunkDepth)}
	c.wg.Go(func() {
		defer close(c.queue)
		put := func(d *decoded) bool {
			select {
			case c.queue <- d:
				return true
			case <-ctx.Done():
				return false
			}
		}
		fail := func(err error) {
			d := &decoded{err: err, ready: make(chan struct{})}
			close(d.ready)
			put(d)
		}
		if streamed {
			c.fromStream(recv, entries, put, fail)
			return
		}
		index := 0
		for _, e := range entries {
			for _, ref := range e.GetChunks() {
				m, err := recv()
				if err == io.EOF {
					fail(status.Errorf(codes.InvalidArgument, "restore: the stream ended before chunk %d (of %q)", index, e.GetPath()))
					return
				}
				if err != nil {
					fail(err)
					return
				}
				c.wire += int64(proto.Size(m))
				z, ok := m.GetMsg().(*agentv1.RestoreRequest_Chunk)
				if !ok {
					fail(status.Errorf(codes.InvalidArgument, "restore: a %T where chunk %d was due", m.GetMsg(), index))
					return
				}
				ce := &wire.ChunkError{Index: index, Path: e.GetPath()}
				copy(ce.ID[:], ref.GetId())
				index++
				d := &decoded{ready: make(chan struct{})}
				if !put(d) {
					return
				}
				c.wg.Go(func() {
					defer close(d.ready)
					d.buf = wire.Buffers.Get(int(ref.GetSize()) + wire.DecodeSlack)
					d.plain, d.err = decodeChunk(z.Chunk, ref.GetSize(), ce, (*d.buf)[:0])
					// The message is this goroutine's alone, and the
					// decoder keeps nothing of its input (zstd's DecodeAll
					// drops it on return).
					wire.Release(z.Chunk)
					if d.err != nil {
						wire.Buffers.Put(d.buf)
						d.buf = nil
					}
				})
			}
		}
		// The end check: nothing may follow the last chunk.
		m, err := recv()
		switch {
		case err == io.EOF:
			err = nil
		case err == nil:
			err = status.Errorf(codes.InvalidArgument, "restore: a %T after the last chunk", m.GetMsg())
		}
		fail(err)
	})
	return c
}

// maxStreamWindow bounds the window a Restore's chunk stream may ask the
// decoder for (the host's encoder asks half): the memory a stream can
// make the agent hold.
const maxStreamWindow = 8 << 20

// fromStream is the chunk pipe's reader for a streamed Restore: one zstd
// stream of the chunks' plaintexts in order of reference, cut into
// stream messages. Each chunk is read whole, then checked against its id
// in a goroutine of its own, as a stored chunk is.
func (c *chunkPipe) fromStream(recv func() (*agentv1.RestoreRequest, error), entries []*agentv1.RestoreEntry, put func(*decoded) bool, fail func(error)) {
	pr := &pieceReader{recv: recv, wire: &c.wire}
	dec, err := zstd.NewReader(pr, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxStreamWindow), zstd.WithDecoderMaxMemory(wire.MaxChunk+maxStreamWindow))
	if err != nil {
		fail(fmt.Errorf("restore: chunk stream: %w", err))
		return
	}
	defer dec.Close()
	// broken names why the stream could not be read: the channel's or the
	// framing's error first, the decoder's otherwise.
	broken := func(index int, path string, err error) error {
		if pr.err != nil {
			return pr.err
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return status.Errorf(codes.InvalidArgument, "restore: the chunk stream ended before chunk %d (of %q)", index, path)
		}
		return status.Errorf(codes.InvalidArgument, "restore: the chunk stream does not decode at chunk %d (of %q): %v", index, path, err)
	}
	index := 0
	for _, e := range entries {
		for _, ref := range e.GetChunks() {
			size := int(ref.GetSize())
			buf := wire.Buffers.Get(size + wire.DecodeSlack)
			plain := (*buf)[:size]
			if _, err := io.ReadFull(dec, plain); err != nil {
				wire.Buffers.Put(buf)
				fail(broken(index, e.GetPath(), err))
				return
			}
			ce := &wire.ChunkError{Index: index, Path: e.GetPath()}
			copy(ce.ID[:], ref.GetId())
			index++
			d := &decoded{ready: make(chan struct{})}
			if !put(d) {
				wire.Buffers.Put(buf)
				return
			}
			c.wg.Go(func() {
				defer close(d.ready)
				if sha256.Sum256(plain) != ce.ID {
					ce.Err = errors.New("content does not match its id")
					d.err = ce
					wire.Buffers.Put(buf)
					return
				}
				d.plain, d.buf = plain, buf
			})
		}
	}
	// The end check: the stream ends with the last chunk, and no message
	// follows it.
	var one [1]byte
	n, err := dec.Read(one[:])
	switch {
	case n > 0:
		err = status.Errorf(codes.InvalidArgument, "restore: the chunk stream goes on after the last chunk")
	case pr.err != nil:
		err = pr.err
	case err == io.EOF:
		err = nil
	default:
		err = status.Errorf(codes.InvalidArgument, "restore: the chunk stream does not end cleanly: %v", err)
	}
	fail(err)
}

// pieceReader reads a Restore's stream messages as one byte stream; it
// ends with the call's stream (io.EOF), and any other message is an
// error it keeps in err.
type pieceReader struct {
	recv func() (*agentv1.RestoreRequest, error)
	wire *int64
	cur  []byte
	err  error
}

func (r *pieceReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		m, err := r.recv()
		if err == io.EOF {
			return 0, io.EOF
		}
		if err != nil {
			r.err = err
			return 0, err
		}
		*r.wire += int64(proto.Size(m))
		piece, ok := m.GetMsg().(*agentv1.RestoreRequest_Stream)
		if !ok {
			r.err = status.Errorf(codes.InvalidArgument, "restore: a %T in the chunk stream", m.GetMsg())
			return 0, r.err
		}
		// Not released to wire.Buffers: the message is small next to
		// the chunks, and the decoder may hold on to what it was given
		// until its next Read.
		r.cur = piece.Stream
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// decodeChunk decodes one stored chunk into dst's storage (size plus
// wire.DecodeSlack bytes of it) and checks it against its reference, filling
// in ce's reason when it does not match.
func decodeChunk(z []byte, size int64, ce *wire.ChunkError, dst []byte) ([]byte, error) {
	plain, err := wire.ChunkDecoder(size).DecodeAll(z, dst[:0:size+wire.DecodeSlack])
	switch {
	case err != nil:
		ce.Err = fmt.Errorf("does not decode: %v", err)
	case int64(len(plain)) != size:
		ce.Err = fmt.Errorf("%d bytes, the entry says %d", len(plain), size)
	case sha256.Sum256(plain) != ce.ID:
		ce.Err = errors.New("content does not match its id")
	default:
		return plain, nil
	}
	return nil, ce
}

// take returns the next item of the queue once it is ready, and the
// storage to give back to wire.Buffers once it is read.
func (c *chunkPipe) take() ([]byte, *[]byte, error) {
	d, ok := <-c.queue
	if !ok {
		return nil, nil, context.Canceled
	}
	<-d.ready
	return d.plain, d.buf, d.err
}

func (c *chunkPipe) reset(e *agentv1.RestoreEntry) { c.entry, c.next, c.left = e, 0, nil }

func (c *chunkPipe) Read(p []byte) (int, error) {
	for len(c.left) == 0 {
		if c.next == len(c.entry.GetChunks()) {
			return 0, io.EOF
		}
		if c.cur != nil {
			wire.Buffers.Put(c.cur)
			c.cur = nil
		}
		plain, buf, err := c.take()
		if err != nil {
			return 0, err
		}
		c.left, c.cur = plain, buf
		c.next++
	}
	n := copy(p, c.left)
	c.left = c.left[n:]
	return n, nil
}

// end takes the end check, once every chunk has been read.
func (c *chunkPipe) end() error {
	_, _, err := c.take()
	return err
}

// stop ends the pipe, waits for its goroutines and returns the bytes it
// received. The receiving goroutine may wait in recv for the host's next
// message: the host sends on or ends the stream, which ends the wait.
func (c *chunkPipe) stop() int64 {
	c.cancel()
	for range c.queue {
		// Drain, so that the receiver is not held on a full queue.
	}
	c.wg.Wait()
	return c.wire
}
