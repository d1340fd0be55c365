package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// ErrChunk matches a Restore whose chunk does not decode to the content
// its id names: a damaged store, or a damaged relay. *ChunkError says
// which.
var ErrChunk = errors.New("chunk does not match its id")

// ChunkError is a Restore chunk the agent refused: Index counts the
// chunks the call sent, from 0.
type ChunkError struct {
	Index int
	ID    [sha256.Size]byte
	Path  string // the file it belongs to
	Err   error
}

func (e *ChunkError) Error() string {
	return fmt.Sprintf("chunk %d (%x) of %q: %v", e.Index, e.ID, e.Path, e.Err)
}

func (e *ChunkError) Unwrap() error { return ErrChunk }

// maxRestoreEntries bounds the entries a Restore header may announce: the
// agent holds them all while the chunks arrive.
const maxRestoreEntries = 1 << 20

func (s *server) Restore(stream agentv1.Agent_RestoreServer) error {
	st, err := s.restore(stream)
	if err != nil {
		return toStatus(err)
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
	wire := int64(proto.Size(first))
	entries := make([]*agentv1.RestoreEntry, 0, n)
	for int64(len(entries)) < n {
		m, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		wire += int64(proto.Size(m))
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
		chunks := startChunkPipe(ctx, stream.Recv, entries)
		// Nothing may follow the last chunk, which is checked before the
		// archive's end is written: the extractor places the tree on it.
		werr = writeRestoreTree(ctx, pw, entries, chunks, chunks.end)
		wire += chunks.stop()
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
	return &agentv1.Stats{Files: xs.Files, Dirs: xs.Dirs, Symlinks: xs.Symlinks, Bytes: xs.Bytes, WireBytes: wire}, nil
}

// checkRestoreEntries refuses what the tar writer would write wrongly
// rather than refuse: a file whose chunks do not add up to its size, a
// chunk over the limit, chunks on something that is not a file.
func checkRestoreEntries(entries []*agentv1.RestoreEntry) error {
	for _, e := range entries {
		var sum int64
		for _, c := range e.GetChunks() {
			if c.GetSize() < 1 || c.GetSize() > maxChunk || len(c.GetId()) != sha256.Size {
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
// chunkDepth+1 chunks of at most maxChunk bytes.
const chunkDepth = 4

// decoded is one chunk of a Restore, decoded and checked, or the reason it
// is not; ready is closed once it is either.
type decoded struct {
	plain []byte
	buf   *[]byte // plain's storage, from buffers; nil after a failure
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
	cur   *[]byte // the current chunk's storage, back to buffers once read
}

// startChunkPipe starts receiving and decoding the chunks entries
// reference. stop ends it; no goroutine outlives stop.
func startChunkPipe(ctx context.Context, recv func() (*agentv1.RestoreRequest, error), entries []*agentv1.RestoreEntry) *chunkPipe {
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
				ce := &ChunkError{Index: index, Path: e.GetPath()}
				copy(ce.ID[:], ref.GetId())
				index++
				d := &decoded{ready: make(chan struct{})}
				if !put(d) {
					return
				}
				c.wg.Go(func() {
					defer close(d.ready)
					d.buf = buffers.Get(int(ref.GetSize()) + decodeSlack)
					d.plain, d.err = decodeChunk(z.Chunk, ref.GetSize(), ce, (*d.buf)[:0])
					// The message is this goroutine's alone, and the
					// decoder keeps nothing of its input (zstd's DecodeAll
					// drops it on return).
					release(z.Chunk)
					if d.err != nil {
						buffers.Put(d.buf)
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

// decodeChunk decodes one stored chunk into dst's storage (size plus
// decodeSlack bytes of it) and checks it against its reference, filling
// in ce's reason when it does not match.
func decodeChunk(z []byte, size int64, ce *ChunkError, dst []byte) ([]byte, error) {
	plain, err := chunkDecoder(size).DecodeAll(z, dst[:0:size+decodeSlack])
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
// storage to give back to buffers once it is read.
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
			buffers.Put(c.cur)
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

// chunkIndex is the metadata key that carries ChunkError.Index.
const chunkIndex = "chunk"

func chunkMeta(err error) map[string]string {
	var ce *ChunkError
	if !errors.As(err, &ce) {
		return nil
	}
	return map[string]string{chunkIndex: strconv.Itoa(ce.Index), "entry": ce.Path}
}

// RestoreSpec is where and how Restore places a tree in the sandbox; the
// fields are Put's.
type RestoreSpec struct {
	Dest    string
	Place   archive.Placement
	Limits  archive.Limits
	Staging string
}

// RestoreEntry is one entry of the tree Restore builds, in the order the
// tree is written: a directory before what it holds. "." is the root,
// which gives a PlaceNew destination its mode and mtime.
type RestoreEntry struct {
	Path   string
	Kind   archive.Kind // Dir, File or Symlink
	Mode   fs.FileMode  // permission bits
	MTime  time.Time
	Size   int64  // of a File: the sum of its chunks' sizes
	Target string // of a Symlink
	Chunks []ChunkRef
}

// ChunkRef is one chunk of a file: the SHA-256 of its plaintext, and its
// plaintext size.
type ChunkRef struct {
	ID   [sha256.Size]byte
	Size int64
}

// StoredChunk returns chunk id as the store keeps it, one zstd frame, in
// buf's storage when it fits. Restore does not decode it: the agent does,
// and checks it against id before writing any of it.
type StoredChunk func(ctx context.Context, id [sha256.Size]byte, buf []byte) ([]byte, error)

// restoreBatch is how many entries go in one message: well under the
// message limit with paths and chunk lists of the usual sizes.
const restoreBatch = 256

// Restore builds the tree entries describe at spec.Dest from stored
// chunks and places it as Put does, once every chunk has been checked.
// Every chunk is sent as stored, in order of reference (a chunk that two
// files share is sent twice). A chunk the agent finds damaged fails the
// call with a *ChunkError naming it (matching ErrChunk), and nothing is
// placed. When chunk fails, Restore cancels the call and returns its error.
//
// WireBytes in the result counts the messages the agent received.
func (c *Client) Restore(ctx context.Context, spec RestoreSpec, entries []RestoreEntry, chunk StoredChunk) (Result, error) {
	op := "restore " + spec.Dest
	if err := checkRemotePath("restore", spec.Dest); err != nil {
		return Result{}, err
	}
	place, ok := placements[spec.Place]
	if !ok {
		return Result{}, fmt.Errorf("%s: unknown placement %v", op, spec.Place)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Restore(ctx)
	if err != nil {
		return Result{}, c.callErr(op, err)
	}
	var refs []ChunkRef // in the order they are sent, to name a refused one
	pathOf := map[int]string{}
	ended := func() error {
		_, err := stream.CloseAndRecv()
		if err == nil {
			err = errors.New("the agent ended the call early")
		}
		return c.restoreErr(op, err, refs, pathOf)
	}
	hdr := &agentv1.RestoreHeader{Dest: spec.Dest, Place: place, Limits: limitsToProto(spec.Limits), Staging: spec.Staging, Entries: int64(len(entries))}
	if err := stream.Send(&agentv1.RestoreRequest{Msg: &agentv1.RestoreRequest_Header{Header: hdr}}); err != nil {
		return Result{}, ended()
	}
	var want archive.Stats
	var wire int64
	batch := make([]*agentv1.RestoreEntry, 0, restoreBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		m := &agentv1.RestoreRequest{Msg: &agentv1.RestoreRequest_Entries{Entries: &agentv1.RestoreEntries{Entries: batch}}}
		wire += int64(proto.Size(m))
		err := stream.Send(m)
		batch = make([]*agentv1.RestoreEntry, 0, restoreBatch)
		return err
	}
	for _, e := range entries {
		pe := &agentv1.RestoreEntry{Path: e.Path, Mode: uint32(e.Mode.Perm()), MtimeUnixNano: e.MTime.UnixNano(), Size: e.Size, Target: e.Target}
		switch e.Kind {
		case archive.Dir:
			pe.Kind = agentv1.Kind_KIND_DIR
			if e.Path != "." {
				want.Dirs++
			}
		case archive.Symlink:
			pe.Kind = agentv1.Kind_KIND_SYMLINK
			want.Symlinks++
		case archive.File:
			pe.Kind = agentv1.Kind_KIND_FILE
			want.Files++
			want.Bytes += e.Size
		default:
			return Result{}, fmt.Errorf("%s: entry %q: %w: kind %v", op, e.Path, archive.ErrUnsupported, e.Kind)
		}
		for _, ch := range e.Chunks {
			pathOf[len(refs)] = e.Path
			refs = append(refs, ch)
			pe.Chunks = append(pe.Chunks, &agentv1.ChunkInfo{Id: ch.ID[:], Size: ch.Size})
		}
		batch = append(batch, pe)
		if len(batch) == restoreBatch {
			if err := flush(); err != nil {
				return Result{}, ended()
			}
		}
	}
	if err := flush(); err != nil {
		return Result{}, ended()
	}
	var buf []byte
	for _, ref := range refs {
		stored, err := chunk(ctx, ref.ID, buf)
		if err != nil {
			abandon(func() { stream.CloseAndRecv() }, cancel)
			return Result{}, fmt.Errorf("%s: %w", op, err)
		}
		m := &agentv1.RestoreRequest{Msg: &agentv1.RestoreRequest_Chunk{Chunk: stored}}
		wire += int64(proto.Size(m))
		if err := stream.Send(m); err != nil {
			return Result{}, ended()
		}
		// gRPC has copied the message into its own buffers once Send
		// returns, so the buffer can take the next chunk.
		buf = stored[:0]
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return Result{}, c.restoreErr(op, err, refs, pathOf)
	}
	as := resp.GetStats()
	if as.GetFiles() != want.Files || as.GetDirs() != want.Dirs || as.GetSymlinks() != want.Symlinks || as.GetBytes() != want.Bytes {
		return Result{}, fmt.Errorf("%s: %w: the agent reports %v, the host sent %+v", op, archive.ErrDigest, as, want)
	}
	return Result{Stats: want, WireBytes: wire, Entries: want.Files + want.Dirs + want.Symlinks, StaleStaging: staleCount(stream.Trailer())}, nil
}

// abandon ends a Put or Restore the host cannot finish by half-closing
// it (closeAndRecv) rather than cancelling it: the agent sees the stream
// end early, fails, and removes its staging directory before it answers.
// Cancelling instead would leave that cleanup racing the connection's
// close. The wait is bounded: past abandonWait, cancel ends the call
// after all.
func abandon(closeAndRecv func(), cancel context.CancelFunc) {
	t := time.AfterFunc(abandonWait, cancel)
	defer t.Stop()
	closeAndRecv()
}

// abandonWait bounds how long abandon waits for the agent's answer.
const abandonWait = 30 * time.Second

// restoreErr is callErr, with a chunk the agent refused turned into a
// *ChunkError that names it from the host's own list (the agent only says
// which position).
func (c *Client) restoreErr(op string, err error, refs []ChunkRef, pathOf map[int]string) error {
	err = c.callErr(op, err)
	var re *RemoteError
	if !errors.As(err, &re) || !errors.Is(err, ErrChunk) {
		return err
	}
	i, perr := strconv.Atoi(re.chunk)
	if perr != nil || i < 0 || i >= len(refs) {
		return err
	}
	return fmt.Errorf("%s: %w", op, &ChunkError{Index: i, ID: refs[i].ID, Path: pathOf[i], Err: re})
}

// decodeSlack is room past a chunk's size in its decode buffer: zstd's
// fast decoding loop writes in wide words and needs some, else it falls
// back to a loop a few times slower (measured: decoding was half of a
// restore's CPU with an exact-size buffer). The decoder still stops at
// the cap, so a chunk that decodes long is refused all the same.
const decodeSlack = 4 << 10
