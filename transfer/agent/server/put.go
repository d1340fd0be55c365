package server

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/archive"
)

func (s *server) Put(stream agentv1.Agent_PutServer) error {
	st, into, err := s.put(stream)
	if err != nil {
		return wire.ToStatus(err)
	}
	return stream.SendAndClose(&agentv1.PutResponse{Stats: st, PlacedInto: into})
}

func (s *server) put(stream agentv1.Agent_PutServer) (_ *agentv1.Stats, into bool, err error) {
	ctx := stream.Context()
	// The round trip goes to the host in a header as soon as it is
	// known, at once on a connection that has timed it, so that it
	// reaches the host before much of the data it helps to compress has
	// been sent (wire.RTTKey). It is sent beside the Recvs, and done
	// with before put returns and the response is sent. A header that
	// cannot go means a stream that is over: Recv says why.
	stop, sent := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sent)
		select {
		case <-s.rttKnown:
			stream.SendHeader(wire.RTTHeader(s.rtt()))
		case <-stop:
		case <-ctx.Done():
		}
	}()
	defer func() {
		close(stop)
		<-sent
	}()
	first, err := stream.Recv()
	if err != nil {
		return nil, false, err
	}
	h := first.GetHeader()
	if h == nil {
		return nil, false, status.Error(codes.InvalidArgument, "put: the first message is not a header")
	}
	place, lim, err := destHeader("put", h.GetDest(), h.GetPlace(), h.GetLimits())
	if err != nil {
		return nil, false, err
	}
	format, err := wire.FormatFromProto("put "+h.GetDest(), h.GetFormat())
	if err != nil {
		return nil, false, err
	}
	dest := s.abs(h.GetDest())
	if h.GetIntoIfDir() {
		if place != archive.PlaceAs {
			return nil, false, status.Errorf(codes.InvalidArgument, "put %s: into_if_dir with placement %v", h.GetDest(), place)
		}
		// Followed, as a copy's destination is: a symlink to a
		// directory takes the archive into the directory.
		if fi, err := os.Stat(dest); err == nil && fi.IsDir() {
			place, into = archive.PlaceInto, true
		}
	}
	// The errors below name dest or the entry at fault.
	if err := prepareDest(dest, place); err != nil {
		return nil, false, err
	}
	msgs := &wire.MsgReader{Owned: true, Recv: func() ([]byte, *agentv1.Trailer, error) {
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
	tr := wire.NewTreeReader(msgs, lim)
	xs, err := archive.Extract(ctx, tr.Frames, dest, archive.ExtractOptions{
		Limits:  lim,
		Place:   place,
		OnFile:  tr.OnFile,
		Verify:  tr.Verify,
		Staging: h.GetStaging(),
		OnStale: s.reportStale(stream, "put", h.GetDest()),
		Format:  format,
	})
	if err != nil {
		return nil, false, err
	}
	return &agentv1.Stats{Files: xs.Files, Dirs: xs.Dirs, Symlinks: xs.Symlinks, Bytes: xs.Bytes, WireBytes: msgs.Wire}, into, nil
}

// destHeader checks the destination, placement and limits a Put or
// Restore header names, and converts them.
func destHeader(op, dest string, pp agentv1.Placement, pl *agentv1.Limits) (archive.Placement, archive.Limits, error) {
	if err := wire.CheckRemotePath(op, dest); err != nil {
		return 0, archive.Limits{}, err
	}
	for p, v := range wire.Placements {
		if v == pp {
			lim, err := wire.LimitsFromProto(pl)
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
