package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
)

func (s *server) Put(stream agentv1.Agent_PutServer) error {
	st, err := s.put(stream)
	if err != nil {
		return toStatus(err)
	}
	return stream.SendAndClose(&agentv1.PutResponse{Stats: st})
}

func (s *server) put(stream agentv1.Agent_PutServer) (*agentv1.Stats, error) {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	h := first.GetHeader()
	if h == nil {
		return nil, status.Error(codes.InvalidArgument, "put: the first message is not a header")
	}
	place, lim, err := destHeader("put", h.GetDest(), h.GetPlace(), h.GetLimits())
	if err != nil {
		return nil, err
	}
	dest := s.abs(h.GetDest())
	// The errors below name dest or the entry at fault.
	if err := prepareDest(dest, place); err != nil {
		return nil, err
	}
	msgs := &msgReader{owned: true, recv: func() ([]byte, *agentv1.Trailer, error) {
		m, err := stream.Recv()
		if err != nil {
			return nil, nil, err
		}
		switch m.GetMsg().(type) {
		case *agentv1.PutRequest_Data:
			return m.GetData(), nil, nil
		case *agentv1.PutRequest_Trailer:
			return nil, m.GetTrailer(), nil
		}
		return nil, nil, status.Error(codes.InvalidArgument, "put: a second header, or an empty message, among the data")
	}}
	tr := newTreeReader(msgs, lim)
	xs, err := archive.Extract(ctx, tr.fr, dest, archive.ExtractOptions{
		Limits:  lim,
		Place:   place,
		OnFile:  tr.onFile,
		Verify:  tr.verify,
		Staging: h.GetStaging(),
		OnStale: s.reportStale(stream, "put", h.GetDest()),
	})
	if err != nil {
		return nil, err
	}
	return &agentv1.Stats{Files: xs.Files, Dirs: xs.Dirs, Symlinks: xs.Symlinks, Bytes: xs.Bytes, WireBytes: msgs.wire}, nil
}

// destHeader checks the destination, placement and limits a Put or
// Restore header names, and converts them.
func destHeader(op, dest string, pp agentv1.Placement, pl *agentv1.Limits) (archive.Placement, archive.Limits, error) {
	if err := checkRemotePath(op, dest); err != nil {
		return 0, archive.Limits{}, err
	}
	for p, v := range placements {
		if v == pp {
			lim, err := limitsFromProto(pl)
			if err != nil {
				return 0, archive.Limits{}, status.Errorf(codes.InvalidArgument, "%s %s: %v", op, dest, err)
			}
			return p, lim, nil
		}
	}
	return 0, archive.Limits{}, status.Errorf(codes.InvalidArgument, "%s %s: unknown placement %v", op, dest, pp)
}

// prepareDest does what POSIX mode's upload.sh does before extracting:
// PlaceNew and PlaceAs make dest's missing parents (mkdir -p), and
// PlaceInto's dest must be a directory (a symlink to one will do).
func prepareDest(dest string, place archive.Placement) error {
	if place != archive.PlaceInto {
		return os.MkdirAll(filepath.Dir(filepath.Clean(dest)), 0o777)
	}
	fi, err := os.Stat(dest)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return &fs.PathError{Op: "put into", Path: dest, Err: syscall.ENOTDIR}
	}
	return nil
}

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
	if err := checkRemotePath("put", spec.Dest); err != nil {
		return Result{}, err
	}
	place, ok := placements[spec.Place]
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
	hdr := &agentv1.PutHeader{Dest: spec.Dest, Place: place, Limits: limitsToProto(spec.Limits), Staging: spec.Staging}
	if err := stream.Send(&agentv1.PutRequest{Msg: &agentv1.PutRequest_Header{Header: hdr}}); err != nil {
		return Result{}, ended()
	}
	t := newTreeWriter(func(b []byte) error {
		return stream.Send(&agentv1.PutRequest{Msg: &agentv1.PutRequest_Data{Data: b}})
	}, spec.Compress, frameRatio(spec.Limits))
	err = fill(t.tw)
	if err == nil {
		err = t.finish()
	}
	if err != nil {
		// The frame writer's goroutines may still be sending: closing it
		// waits for them, before cw is looked at and before the
		// half-close below, after which none may send.
		t.fw.Close()
	}
	if t.cw.failed {
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
	trailer := trailerOf(t.tw)
	if err := stream.Send(&agentv1.PutRequest{Msg: &agentv1.PutRequest_Trailer{Trailer: trailer}}); err != nil {
		return Result{}, ended()
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return Result{}, c.callErr(op, err)
	}
	res := Result{Stats: t.tw.Stats(), WireBytes: t.cw.wire, Entries: trailer.GetEntries(), StaleStaging: staleCount(stream.Trailer())}
	// The agent checked the trailer; a count it reports otherwise is an
	// agent that placed something else.
	if as := resp.GetStats(); as.GetFiles() != res.Files || as.GetDirs() != res.Dirs || as.GetSymlinks() != res.Symlinks || as.GetBytes() != res.Bytes {
		return Result{}, fmt.Errorf("%s: %w: the agent reports %v, the host sent %+v", op, archive.ErrDigest, as, res.Stats)
	}
	return res, nil
}
