package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// ErrChanged matches a ReadChunks that failed because a file no longer
// holds, at the offset a Scan reported, the chunk the Scan hashed: it was
// written to since. A retry of the whole save (a new Scan) is the remedy.
var ErrChanged = errors.New("agent: file changed since the scan")

// ReadChunks fetches chunks a Scan of dir reported and calls fn with each
// one's plaintext, in the order of reads; i is its index in reads. The
// plaintext is valid only until fn returns. It returns the wire bytes of
// the chunks (compressed where that paid).
//
// The agent may be hostile: every chunk must come once and in order, no
// larger than asked (compressed or decompressed), with exactly the size
// asked for and the SHA-256 of its id; anything else fails with
// archive.ErrDigest. A file that changed since the scan fails with a
// *RemoteError matching ErrChanged and naming it.
func (c *Client) ReadChunks(ctx context.Context, dir string, reads []ChunkRead, compress frame.Mode, fn func(i int, plaintext []byte) error) (int64, error) {
	return c.ReadChunksStored(ctx, dir, reads, compress, func(i int, plaintext, _ []byte) error { return fn(i, plaintext) })
}

// ReadChunksStored is ReadChunks that also hands fn the zstd frame a chunk
// travelled in (nil when it travelled raw), which decoded to plaintext:
// a store that keeps chunks as zstd can keep that frame as it is instead
// of compressing the chunk again. Both slices are valid only during fn.
// The frame of a chunk of at most cdc.Default().Max bytes was decoded by
// frame.NewChunkDecoder(cdc.Default().Max), the session store's reader, so
// the store accepts it as it is: a frame it would refuse (a window over
// that bound, say) fails the call with archive.ErrDigest.
func (c *Client) ReadChunksStored(ctx context.Context, dir string, reads []ChunkRead, compress frame.Mode, fn func(i int, plaintext, zstd []byte) error) (int64, error) {
	if dir == "" {
		dir = "."
	}
	op := fmt.Sprintf("read %d chunks from %s", len(reads), dir)
	if err := wire.CheckRemotePath("read chunks", dir); err != nil {
		return 0, err
	}
	mode, ok := wire.Compressions[compress]
	if !ok {
		return 0, fmt.Errorf("%s: unknown compression %v", op, compress)
	}
	if len(reads) > wire.MaxReads {
		return 0, fmt.Errorf("%s: %w: at most %d", op, archive.ErrLimit, wire.MaxReads)
	}
	req := &agentv1.ReadChunksRequest{Dir: dir, Reads: make([]*agentv1.ChunkRead, len(reads)), Compression: mode}
	for i, r := range reads {
		if err := wire.CheckRemotePath("read chunks", r.Path); err != nil {
			return 0, err
		}
		if r.Size < 1 || r.Size > wire.MaxChunk || r.Offset < 0 {
			return 0, fmt.Errorf("%s: read %d of %s: offset %d, size %d: %w", op, i, r.Path, r.Offset, r.Size, ErrInvalidPath)
		}
		req.Reads[i] = &agentv1.ChunkRead{Path: r.Path, Offset: r.Offset, Size: r.Size, Id: reads[i].ID[:]}
	}
	if len(reads) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.ReadChunks(ctx, req)
	if err != nil {
		return 0, c.callErr(op, err)
	}
	var onWire int64
	var buf []byte
	for next := 0; ; next++ {
		m, err := stream.Recv()
		if err == io.EOF {
			if next != len(reads) {
				return onWire, fmt.Errorf("%s: %w: the agent sent %d chunks, not %s at %d", op, archive.ErrDigest, next, reads[next].Path, reads[next].Offset)
			}
			return onWire, nil
		}
		if err != nil {
			return onWire, c.readErr(op, err)
		}
		if next == len(reads) || int(m.GetIndex()) != next {
			return onWire, fmt.Errorf("%s: %w: the agent sent chunk %d, want %d", op, archive.ErrDigest, m.GetIndex(), next)
		}
		r := reads[next]
		onWire += int64(len(m.GetData()))
		var data, stored []byte
		data, stored, buf, err = checkChunk(r.Size, r.ID, m.GetData(), m.GetZstd(), buf)
		if err != nil {
			return onWire, fmt.Errorf("%s: %s at %d: %w", op, r.Path, r.Offset, err)
		}
		if err := fn(next, data, stored); err != nil {
			return onWire, err
		}
	}
}

// checkChunk checks that data (one zstd frame of it when zstd) is the
// chunk of size bytes whose SHA-256 is id, and returns its plaintext, and
// data as the stored frame when zstd. buf is storage for the plaintext,
// returned grown as needed. Every failure matches archive.ErrDigest.
func checkChunk(size int64, id [sha256.Size]byte, data []byte, zstd bool, buf []byte) (plain, stored, _ []byte, err error) {
	if int64(len(data)) > size+size/8+1024 || int64(len(data)) > size && !zstd {
		return nil, nil, buf, fmt.Errorf("%w: %d bytes for %d", archive.ErrDigest, len(data), size)
	}
	plain = data
	if zstd {
		if cap(buf) < int(size+wire.DecodeSlack) {
			buf = make([]byte, 0, size+wire.DecodeSlack)
		}
		stored = data
		if plain, err = wire.ChunkDecoder(size).DecodeAll(data, buf[:0:size+wire.DecodeSlack]); err != nil {
			return nil, nil, buf, fmt.Errorf("%w: %v", archive.ErrDigest, err)
		}
	}
	if int64(len(plain)) != size {
		return nil, nil, buf, fmt.Errorf("%w: %d bytes for %d", archive.ErrDigest, len(plain), size)
	}
	if sha256.Sum256(plain) != id {
		return nil, nil, buf, fmt.Errorf("%w: SHA-256 differs from the scan's", archive.ErrDigest)
	}
	return plain, stored, buf, nil
}

// ChunkRead is one chunk for ReadChunks to fetch: a range of a file
// under the directory that a Scan reported, and the SHA-256 it had.
type ChunkRead struct {
	Path         string
	Offset, Size int64
	ID           [sha256.Size]byte
}

// readErr is callErr that makes a changed file's failure match
// ErrChanged.
func (c *Client) readErr(op string, err error) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.FailedPrecondition {
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == wire.ErrorDomain && info.GetReason() == wire.ReasonChanged {
				re := fromStatus(err).(*RemoteError)
				re.kind = ErrChanged
				return c.wrap(op, re)
			}
		}
	}
	return c.callErr(op, err)
}
