package agent

import (
	"context"
	"fmt"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
)

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
	// FilesOnly leaves out, instead of failing on, every name that is
	// not a regular file in the sandbox, and a Dir that is missing; what
	// came is what Local holds after. (A hostile agent may leave out
	// what it likes: a caller must treat a name left out as missing.)
	FilesOnly bool
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
	if err := wire.CheckRemotePath("get", dir); err != nil {
		return Result{}, err
	}
	if len(spec.Names) == 0 {
		return Result{}, fmt.Errorf("%s: %w: no names", op, ErrInvalidPath)
	}
	var minEntries int64
	seen := map[string]bool{}
	for _, n := range spec.Names {
		c, err := wire.MemberName("get", n)
		if err != nil {
			return Result{}, err
		}
		if c != "." && !seen[c] {
			seen[c] = true
			minEntries++
		}
	}
	if spec.FilesOnly {
		minEntries = 0 // each name may be left out
	}
	mode, ok := wire.Compressions[spec.Compress]
	if !ok {
		return Result{}, fmt.Errorf("%s: unknown compression %v", op, spec.Compress)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Get(ctx, &agentv1.GetRequest{Dir: dir, Names: spec.Names, Compression: mode, FilesOnly: spec.FilesOnly})
	if err != nil {
		return Result{}, c.callErr(op, err)
	}
	msgs := &wire.MsgReader{Owned: true, Recv: func() ([]byte, *agentv1.Trailer, error) {
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
	tr := wire.NewTreeReader(msgs, spec.Limits)
	tr.MinEntries = minEntries
	var stale int
	st, err := archive.Extract(ctx, tr.Frames, spec.Local, archive.ExtractOptions{
		Limits:  spec.Limits,
		Place:   spec.Place,
		Names:   spec.Names,
		OnFile:  tr.OnFile,
		Verify:  tr.Verify,
		OnStale: func(n int, _ error) { stale = n },
	})
	if err != nil {
		// The agent's own failure ended the stream: that is the cause.
		if msgs.Remote != nil {
			return Result{}, c.callErr(op, msgs.Remote)
		}
		return Result{}, fmt.Errorf("%s: %w", op, err)
	}
	return Result{Stats: st, WireBytes: msgs.Wire, Entries: msgs.Trailer.GetEntries(), StaleStaging: stale, Frames: tr.Frames.Stats()}, nil
}
