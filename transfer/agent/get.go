package agent

import (
	"context"
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

func (s *server) Get(req *agentv1.GetRequest, stream agentv1.Agent_GetServer) error {
	return toStatus(s.get(req, stream))
}

func (s *server) get(req *agentv1.GetRequest, stream agentv1.Agent_GetServer) error {
	ctx := stream.Context()
	rd := req.GetDir()
	if rd == "" {
		rd = "."
	}
	if err := checkRemotePath("get", rd); err != nil {
		return err
	}
	if len(req.GetNames()) == 0 {
		return fmt.Errorf("get %s: %w: no names", rd, ErrInvalidPath)
	}
	names := make([]string, len(req.GetNames()))
	for i, n := range req.GetNames() {
		c, err := memberName("get", n)
		if err != nil {
			return err
		}
		names[i] = c
	}
	var mode frame.Mode
	found := false
	for m, v := range compressions {
		if v == req.GetCompression() {
			mode, found = m, true
		}
	}
	if !found {
		return status.Errorf(codes.InvalidArgument, "get %s: unknown compression %v", rd, req.GetCompression())
	}
	// As POSIX mode's download.sh: dir is followed (cd), every name must
	// exist (a dangling symlink does), and is then archived as it is.
	dir := s.abs(rd)
	if fi, err := os.Stat(dir); err != nil {
		return err
	} else if !fi.IsDir() {
		return &fs.PathError{Op: "get", Path: dir, Err: syscall.ENOTDIR}
	}
	for _, n := range names {
		if n == "." {
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(n))); err != nil {
			return err
		}
	}
	t := newTreeWriter(func(b []byte) error {
		return stream.Send(&agentv1.GetResponse{Msg: &agentv1.GetResponse_Data{Data: b}})
	}, mode, 0)
	var err error
	for _, n := range names {
		if n == "." {
			err = t.tw.AddRoot(ctx, dir)
		} else {
			err = t.tw.Add(ctx, filepath.Join(dir, filepath.FromSlash(n)), n)
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		err = t.finish()
	}
	if err != nil {
		if cerr := ctx.Err(); t.cw.failed && cerr != nil {
			return cerr // the host went away; nobody reads a status
		}
		return err
	}
	return stream.Send(&agentv1.GetResponse{Msg: &agentv1.GetResponse_Trailer{Trailer: trailerOf(t.tw)}})
}

// GetSpec is what Get takes from the sandbox and where it lands.
type GetSpec struct {
	// Dir is the directory in the sandbox names are taken from (followed
	// if a symlink); relative paths start at the workspace, "" is the
	// workspace.
	Dir string
	// Names are relative paths inside Dir, usually single elements, or "."
	// for Dir's contents (and its own mode and mtime, given to Local by
	// PlaceNew), as POSIX mode's Download takes them. Each must exist.
	Names []string
	// Local, Place and Limits are as for archive.Extract, which Get runs
	// on the host. Limits.MaxCompressionRatio also bounds the frame
	// stream's blocks; the agent frames with frame.DefaultMaxRatio, so a
	// lower value refuses highly compressible data.
	Local  string
	Place  archive.Placement
	Limits archive.Limits
	// Compress is how the agent frames the data on the wire.
	Compress frame.Mode
}

// Get fetches Names from Dir in the sandbox and places them at Local. The
// host trusts nothing the agent sends: archive.Extract refuses unsafe
// entries and any outside spec.Names (archive.ErrUnrequested), and
// enforces spec.Limits, the frame stream's ratio and its own
// trailer are checked, and nothing is placed unless the agent's trailer
// (entry and byte counts, every file's size and digest) matches what
// arrived and at least one entry arrived for each name other than ".".
//
// A refusal of the stream is the extractor's *archive.EntryError naming
// the entry (archive.ErrUnsafePath, ErrLinkEscape, ErrLimit, ...); a
// stream that stopped early matches archive.ErrTruncated or ErrShort; a
// mismatch with the trailer, archive.ErrDigest. A failure the agent
// reports (a missing name: fs.ErrNotExist; Dir not a directory:
// syscall.ENOTDIR) is a *RemoteError naming the path.
func (c *Client) Get(ctx context.Context, spec GetSpec) (Result, error) {
	dir := spec.Dir
	if dir == "" {
		dir = "."
	}
	op := "get " + dir
	if err := checkRemotePath("get", dir); err != nil {
		return Result{}, err
	}
	if len(spec.Names) == 0 {
		return Result{}, fmt.Errorf("%s: %w: no names", op, ErrInvalidPath)
	}
	var minEntries int64
	seen := map[string]bool{}
	for _, n := range spec.Names {
		c, err := memberName("get", n)
		if err != nil {
			return Result{}, err
		}
		if c != "." && !seen[c] {
			seen[c] = true
			minEntries++
		}
	}
	mode, ok := compressions[spec.Compress]
	if !ok {
		return Result{}, fmt.Errorf("%s: unknown compression %v", op, spec.Compress)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Get(ctx, &agentv1.GetRequest{Dir: dir, Names: spec.Names, Compression: mode})
	if err != nil {
		return Result{}, c.callErr(op, err)
	}
	msgs := &msgReader{owned: true, recv: func() ([]byte, *agentv1.Trailer, error) {
		m, err := stream.Recv()
		if err != nil {
			return nil, nil, err
		}
		switch m.GetMsg().(type) {
		case *agentv1.GetResponse_Data:
			return m.GetData(), nil, nil
		case *agentv1.GetResponse_Trailer:
			return nil, m.GetTrailer(), nil
		}
		return nil, nil, fmt.Errorf("%w: an empty message", archive.ErrDigest)
	}}
	tr := newTreeReader(msgs, spec.Limits)
	tr.minEntries = minEntries
	var stale int
	st, err := archive.Extract(ctx, tr.fr, spec.Local, archive.ExtractOptions{
		Limits:  spec.Limits,
		Place:   spec.Place,
		Names:   spec.Names,
		OnFile:  tr.onFile,
		Verify:  tr.verify,
		OnStale: func(n int, _ error) { stale = n },
	})
	if err != nil {
		// The agent's own failure ended the stream: that is the cause.
		if msgs.remote != nil {
			return Result{}, c.callErr(op, msgs.remote)
		}
		return Result{}, fmt.Errorf("%s: %w", op, err)
	}
	return Result{Stats: st, WireBytes: msgs.wire, Entries: msgs.trailer.GetEntries(), StaleStaging: stale}, nil
}
