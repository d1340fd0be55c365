package agent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// PutSpec is where and how Put places a tree in the sandbox.
type PutSpec struct {
	// Dest is the destination in the sandbox; relative paths start at the
	// workspace.
	Dest string
	// Place is as for archive.Extract, which the agent runs; PlaceNew and
	// PlaceAs make dest's missing parents, as POSIX mode does.
	Place archive.Placement
	// Limits bound what the agent accepts; the agent applies
	// MaxTotalBytes, MaxEntries, MaxFileSize and MaxCompressionRatio, and
	// its defaults for the others.
	Limits archive.Limits
	// Compress is how the data is framed on the wire.
	Compress frame.Mode
	// Staging, when set, names the agent's staging directory beside Dest
	// (see archive.ExtractOptions.Staging), so that a host whose agent
	// died mid-put can remove it through another connection.
	Staging string
	// IntoIfDir, with Place PlaceAs, places into Dest instead when Dest
	// is a directory (a symlink to one followed), as a copy does: the
	// agent decides, which saves a stat of Dest first. The staging
	// directory is then in Dest, or beside it.
	IntoIfDir bool
}

// Put streams a tree to the agent, which extracts it at spec.Dest and
// places it only once the whole stream and its trailer (entry and byte
// counts, every file's size and digest) have been checked. fill writes
// the tree, calling w.Add for each item; Put closes w. One call, one
// stream; memory stays bounded by ChunkSize and the frame block.
//
// Errors the agent reports are *RemoteError naming the path or entry,
// matching the transfer sentinels (archive.ErrLinkEscape for a symlink in
// the tree that points outside it, ErrLimit, ErrExist for dest in the way,
// ...). When fill fails, Put cancels the call and returns fill's error;
// the agent then removes its staging directory on its own time.
func (c *Client) Put(ctx context.Context, spec PutSpec, fill func(w *archive.Writer) error) (Result, error) {
	op := "put " + spec.Dest
	if err := wire.CheckRemotePath("put", spec.Dest); err != nil {
		return Result{}, err
	}
	place, ok := wire.Placements[spec.Place]
	if !ok {
		return Result{}, fmt.Errorf("%s: unknown placement %v", op, spec.Place)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Put(ctx)
	if err != nil {
		return Result{}, c.callErr(op, err)
	}
	// ended gets the agent's status once a Send has failed: the agent
	// ended the call (a refusal) and that is the cause.
	ended := func() error {
		_, err := stream.CloseAndRecv()
		if err == nil {
			err = errors.New("the agent ended the call early")
		}
		return c.callErr(op, err)
	}
	// The agent's round trip comes in the call's header (wire.RTTKey),
	// for Auto; 0 until then.
	var rtt atomic.Int64
	headed := make(chan struct{})
	go func() {
		defer close(headed)
		if md, err := stream.Header(); err == nil {
			rtt.Store(int64(wire.RTTOf(md)))
		}
	}()
	defer func() {
		cancel() // Header returns once the call is over
		<-headed
	}()
	hdr := &agentv1.PutHeader{Dest: spec.Dest, Place: place, Limits: wire.LimitsToProto(spec.Limits), Staging: spec.Staging, IntoIfDir: spec.IntoIfDir, Format: agentv1.ArchiveFormat_ARCHIVE_FORMAT_ENTRIES}
	if err := stream.Send(&agentv1.PutRequest{Msg: &agentv1.PutRequest_Header{Header: hdr}}); err != nil {
		return Result{}, ended()
	}
	t := wire.NewTreeWriter(func(b []byte) error {
		return stream.Send(&agentv1.PutRequest{Msg: &agentv1.PutRequest_Data{Data: b}})
	}, archive.FormatEntries, spec.Compress, wire.FrameRatio(spec.Limits), func() time.Duration { return time.Duration(rtt.Load()) })
	err = fill(t.Tar)
	if err == nil {
		err = t.Finish()
	}
	if err != nil {
		// The frame writer's goroutines may still be sending: closing it
		// waits for them, before cw is looked at and before the
		// half-close below, after which none may send.
		t.Frames.Close()
	}
	if t.Chunks.Failed {
		return Result{}, ended()
	}
	if err != nil {
		// The host's side failed (a source file, most often). Half-close
		// rather than cancel, as Restore does (see abandon): the agent
		// sees the stream end without a trailer, refuses it and removes
		// its staging before it answers.
		abandon(func() { stream.CloseAndRecv() }, cancel)
		return Result{}, fmt.Errorf("%s: %w", op, err)
	}
	trailer := wire.TrailerOf(t.Tar)
	if err := stream.Send(&agentv1.PutRequest{Msg: &agentv1.PutRequest_Trailer{Trailer: trailer}}); err != nil {
		return Result{}, ended()
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return Result{}, c.callErr(op, err)
	}
	res := Result{Stats: t.Tar.Stats(), WireBytes: t.Chunks.Wire, Entries: trailer.GetEntries(), StaleStaging: staleCount(stream.Trailer()), PlacedInto: spec.IntoIfDir && resp.GetPlacedInto(), Frames: t.Frames.Stats()}
	// The agent checked the trailer; a count it reports otherwise is an
	// agent that placed something else.
	if as := resp.GetStats(); as.GetFiles() != res.Files || as.GetDirs() != res.Dirs || as.GetSymlinks() != res.Symlinks || as.GetBytes() != res.Bytes {
		return Result{}, fmt.Errorf("%s: %w: the agent reports %v, the host sent %+v", op, archive.ErrDigest, as, res.Stats)
	}
	return res, nil
}
