package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"time"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// RestoreSpec is where and how Restore places a tree in the sandbox; the
// fields are Put's.
type RestoreSpec struct {
	Dest    string
	Place   archive.Placement
	Limits  archive.Limits
	Staging string
	// Stream sends the chunks as one zstd stream of their plaintexts
	// instead of each stored frame: about half the bytes of chunks
	// compressed one by one, for the host's CPU to decode and encode
	// them again. It pays on a slow link.
	Stream bool
	// Encoded, with Stream, is the stream already under way: started by
	// StartChunkStream from the same entries before the agent was
	// reached, so that encoding overlaps the connection's setup. The
	// caller closes it. Nil: Restore encodes the stream itself.
	Encoded *ChunkStream
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
	if err := wire.CheckRemotePath("restore", spec.Dest); err != nil {
		return Result{}, err
	}
	place, ok := wire.Placements[spec.Place]
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
	hdr := &agentv1.RestoreHeader{Dest: spec.Dest, Place: place, Limits: wire.LimitsToProto(spec.Limits), Staging: spec.Staging, Entries: int64(len(entries)), Stream: spec.Stream}
	if err := stream.Send(&agentv1.RestoreRequest{Msg: &agentv1.RestoreRequest_Header{Header: hdr}}); err != nil {
		return Result{}, ended()
	}
	var want archive.Stats
	var onWire int64
	batch := make([]*agentv1.RestoreEntry, 0, restoreBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		m := &agentv1.RestoreRequest{Msg: &agentv1.RestoreRequest_Entries{Entries: &agentv1.RestoreEntries{Entries: batch}}}
		onWire += int64(proto.Size(m))
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
	send := func(m *agentv1.RestoreRequest) error {
		onWire += int64(proto.Size(m))
		return stream.Send(m)
	}
	var sendErr, chunkErr error
	if spec.Stream {
		cs := spec.Encoded
		if cs == nil {
			cs = StartChunkStream(ctx, entries, chunk)
			defer cs.Close()
		} else if !slices.Equal(cs.refs, refs) {
			return Result{}, fmt.Errorf("%s: the chunk stream was started from other entries", op)
		}
		sendErr, chunkErr = cs.sendTo(ctx, send)
	} else {
		sendErr, chunkErr = sendStored(ctx, refs, chunk, send)
	}
	if chunkErr != nil {
		if ce := (*ChunkError)(nil); errors.As(chunkErr, &ce) && ce.Path == "" {
			ce.Path = pathOf[ce.Index]
		}
		abandon(func() { stream.CloseAndRecv() }, cancel)
		return Result{}, fmt.Errorf("%s: %w", op, chunkErr)
	}
	if sendErr != nil {
		return Result{}, ended()
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return Result{}, c.restoreErr(op, err, refs, pathOf)
	}
	as := resp.GetStats()
	if as.GetFiles() != want.Files || as.GetDirs() != want.Dirs || as.GetSymlinks() != want.Symlinks || as.GetBytes() != want.Bytes {
		return Result{}, fmt.Errorf("%s: %w: the agent reports %v, the host sent %+v", op, archive.ErrDigest, as, want)
	}
	return Result{Stats: want, WireBytes: onWire, Entries: want.Files + want.Dirs + want.Symlinks, StaleStaging: staleCount(stream.Trailer())}, nil
}

// sendStored sends each chunk as the store keeps it. It returns the
// stream's error, or the error of chunk, which the caller reports.
func sendStored(ctx context.Context, refs []ChunkRef, chunk StoredChunk, send func(*agentv1.RestoreRequest) error) (sendErr, chunkErr error) {
	var buf []byte
	for _, ref := range refs {
		stored, err := chunk(ctx, ref.ID, buf)
		if err != nil {
			return nil, err
		}
		if err := send(&agentv1.RestoreRequest{Msg: &agentv1.RestoreRequest_Chunk{Chunk: stored}}); err != nil {
			return err, nil
		}
		// gRPC has copied the message into its own buffers once Send
		// returns, so the buffer can take the next chunk.
		buf = stored[:0]
	}
	return nil, nil
}

// streamPiece is the size of one stream message: a gRPC buffer's worth.
const streamPiece = 256<<10 - 64

// streamWindow is the stream encoder's window; the agent accepts up to
// it. On a 61 MiB session of agent JSONL, encoding alone took 0.88 s
// with a 4 MiB window and the encoder's low-memory mode (which moves its
// history buffer every few blocks), 0.75 s without that mode, and 0.70 s
// with this window, for 3% fewer bytes; the fastest level took 0.56 s
// but sent 39% more, which the link then has to carry.
const streamWindow = 8 << 20

// streamAhead bounds the encoded pieces a ChunkStream holds before they
// are sent: 8 MiB, more than the connection's setup lets the encoder make
// on a slow link (some 2 MiB in region's 220 ms).
const streamAhead = 32

// ChunkStream is a restore's chunks, decoded from the store and encoded
// as one zstd stream (RestoreSpec.Stream), on a goroutine of its own and
// up to streamAhead pieces ahead of the call that sends them.
type ChunkStream struct {
	refs   []ChunkRef
	pieces chan []byte // in order; closed when encoding ends
	err    error       // why encoding ended early; read once pieces is closed
	cancel context.CancelFunc
	done   chan struct{}
}

// StartChunkStream starts encoding the chunks of entries, read through
// chunk in the order Restore sends them. Close stops it.
func StartChunkStream(ctx context.Context, entries []RestoreEntry, chunk StoredChunk) *ChunkStream {
	ctx, cancel := context.WithCancel(ctx)
	cs := &ChunkStream{pieces: make(chan []byte, streamAhead), cancel: cancel, done: make(chan struct{})}
	for _, e := range entries {
		cs.refs = append(cs.refs, e.Chunks...)
	}
	go func() {
		defer close(cs.done)
		defer close(cs.pieces)
		cs.err = cs.encode(ctx, chunk)
	}()
	return cs
}

// Close stops the encoding and waits for its goroutine.
func (cs *ChunkStream) Close() {
	cs.cancel()
	<-cs.done
}

// encode decodes each stored chunk and writes its plaintext to the
// stream. A stored chunk that does not decode to its size is the store's
// damage, named as chunk's errors are.
func (cs *ChunkStream) encode(ctx context.Context, chunk StoredChunk) error {
	pw := &pieceWriter{ctx: ctx, out: cs.pieces, buf: make([]byte, 0, streamPiece)}
	enc, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithWindowSize(streamWindow), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return fmt.Errorf("chunk stream: %w", err)
	}
	defer enc.Close()
	var stored, plain []byte
	for i, ref := range cs.refs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if stored, err = chunk(ctx, ref.ID, stored[:0]); err != nil {
			return err
		}
		// The decoder writes at most dst's capacity: the size bounds it.
		if need := int(ref.Size) + wire.DecodeSlack; cap(plain) < need {
			plain = make([]byte, 0, need)
		}
		plain, err = wire.ChunkDecoder(ref.Size).DecodeAll(stored, plain[:0:ref.Size+wire.DecodeSlack])
		if err == nil && int64(len(plain)) != ref.Size {
			err = fmt.Errorf("%d bytes, the manifest says %d", len(plain), ref.Size)
		}
		if err != nil {
			return &ChunkError{Index: i, ID: ref.ID, Err: fmt.Errorf("stored chunk does not decode: %w", err)}
		}
		if _, err := enc.Write(plain); err != nil {
			return err
		}
	}
	if err := enc.Close(); err != nil {
		return err
	}
	return pw.flush()
}

// sendTo sends the stream's pieces as they come. It returns the
// stream's error, or the error that ended the encoding (a chunk's), which
// the caller reports.
func (cs *ChunkStream) sendTo(ctx context.Context, send func(*agentv1.RestoreRequest) error) (sendErr, chunkErr error) {
	for {
		select {
		case p, ok := <-cs.pieces:
			if !ok {
				return nil, cs.err
			}
			if err := send(&agentv1.RestoreRequest{Msg: &agentv1.RestoreRequest_Stream{Stream: p}}); err != nil {
				return err, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// pieceWriter cuts what is written to it into pieces of streamPiece
// bytes, each in a buffer of its own, and queues them on out.
type pieceWriter struct {
	ctx context.Context
	out chan<- []byte
	buf []byte
}

func (w *pieceWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), streamPiece-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == streamPiece {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// flush queues what is buffered.
func (w *pieceWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	select {
	case w.out <- w.buf:
		w.buf = make([]byte, 0, streamPiece)
		return nil
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
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
