package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"time"

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
	hdr := &agentv1.RestoreHeader{Dest: spec.Dest, Place: place, Limits: wire.LimitsToProto(spec.Limits), Staging: spec.Staging, Entries: int64(len(entries))}
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
	var buf []byte
	for _, ref := range refs {
		stored, err := chunk(ctx, ref.ID, buf)
		if err != nil {
			abandon(func() { stream.CloseAndRecv() }, cancel)
			return Result{}, fmt.Errorf("%s: %w", op, err)
		}
		m := &agentv1.RestoreRequest{Msg: &agentv1.RestoreRequest_Chunk{Chunk: stored}}
		onWire += int64(proto.Size(m))
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
	return Result{Stats: want, WireBytes: onWire, Entries: want.Files + want.Dirs + want.Symlinks, StaleStaging: staleCount(stream.Trailer())}, nil
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
