package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/cdc"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// maxReads bounds one ReadChunks call.
const maxReads = 1 << 16

// ErrChanged matches a ReadChunks that failed because a file no longer
// holds, at the offset a Scan reported, the chunk the Scan hashed: it was
// written to since. A retry of the whole save (a new Scan) is the remedy.
var ErrChanged = errors.New("agent: file changed since the scan")

// reasonChanged is the ErrorInfo reason of ErrChanged.
const reasonChanged = "CHANGED"

// zstdKeep is AUTO's threshold: a chunk travels compressed only when that
// takes at most 97% of its size.
const zstdKeep = 97

var (
	chunkEncoder = mustZstd(zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false)))
	// The decoders of chunk frames, of the one configuration every chunk
	// decoder has (frame.NewChunkDecoder): storeChunkDecoder for a chunk
	// of cdc.Default(), the session store's (session.MaxChunkSize), so that
	// a frame ReadChunksStored hands on for such a chunk is one the
	// store's own reader accepts; bigChunkDecoder for the larger chunks
	// of other chunker parameters.
	storeChunkDecoder = frame.NewChunkDecoder(cdc.Default().Max)
	bigChunkDecoder   = frame.NewChunkDecoder(maxChunk)
)

// chunkDecoder is the decoder of a frame of a chunk of size bytes: the
// smallest bound that holds it.
func chunkDecoder(size int64) *zstd.Decoder {
	if size <= int64(cdc.Default().Max) {
		return storeChunkDecoder
	}
	return bigChunkDecoder
}

func mustZstd[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// ReadChunks sends each requested range, in request order, once its
// SHA-256 equals the id asked for; otherwise the call fails with
// FailedPrecondition (ErrChanged on the host) naming the file. Files are
// opened through an os.Root at req.dir without following a final
// symlink, so no path leads out of dir. One chunk is in memory at a time
// (plus its compressed form).
func (s *server) ReadChunks(req *agentv1.ReadChunksRequest, stream agentv1.Agent_ReadChunksServer) error {
	return toStatus(s.readChunks(stream.Context(), req, stream.Send))
}

func (s *server) readChunks(ctx context.Context, req *agentv1.ReadChunksRequest, send func(*agentv1.ReadChunksResponse) error) error {
	rd := req.GetDir()
	if rd == "" {
		rd = "."
	}
	if err := checkRemotePath("read chunks", rd); err != nil {
		return err
	}
	comp := req.GetCompression()
	if _, ok := agentv1.Compression_name[int32(comp)]; !ok {
		return status.Errorf(codes.InvalidArgument, "read chunks %s: unknown compression %v", rd, comp)
	}
	if len(req.GetReads()) > maxReads {
		return fmt.Errorf("read chunks %s: %w: %d reads, at most %d", rd, archive.ErrLimit, len(req.GetReads()), maxReads)
	}
	dir := s.abs(rd)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()

	var f *os.File
	var open string
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	var buf, z []byte
	resp := &agentv1.ReadChunksResponse{}
	for i, r := range req.GetReads() {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(r.GetPath()))
		if r.GetSize() < 1 || r.GetSize() > maxChunk || r.GetOffset() < 0 || len(r.GetId()) != sha256.Size {
			return status.Errorf(codes.InvalidArgument, "read chunks %s: read %d: offset %d, size %d, id of %d bytes",
				name, i, r.GetOffset(), r.GetSize(), len(r.GetId()))
		}
		if f == nil || open != r.GetPath() {
			if f != nil {
				f.Close()
				f = nil
			}
			if err := checkRemotePath("read chunks", r.GetPath()); err != nil {
				return err
			}
			if f, err = root.OpenFile(r.GetPath(), oScan, 0); err != nil {
				return err
			}
			open = r.GetPath()
			if fi, err := f.Stat(); err != nil {
				return &fs.PathError{Op: "read chunks", Path: name, Err: err}
			} else if !fi.Mode().IsRegular() {
				return changed(name)
			}
		}
		n := int(r.GetSize())
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := f.ReadAt(buf, r.GetOffset()); err == io.EOF {
			return changed(name)
		} else if err != nil {
			return &fs.PathError{Op: "read chunks", Path: name, Err: err}
		}
		if sum := sha256.Sum256(buf); !bytes.Equal(sum[:], r.GetId()) {
			return changed(name)
		}
		resp.Index, resp.Data, resp.Zstd = uint32(i), buf, false
		if comp != agentv1.Compression_COMPRESSION_NONE {
			z = chunkEncoder.EncodeAll(buf, z[:0])
			if comp == agentv1.Compression_COMPRESSION_ZSTD || len(z)*100 <= len(buf)*zstdKeep {
				resp.Data, resp.Zstd = z, true
			}
		}
		if err := send(resp); err != nil {
			return err
		}
	}
	return nil
}

// changed is the failure of a read whose bytes are no longer the chunk
// the scan saw.
func changed(name string) error {
	st := status.New(codes.FailedPrecondition, fmt.Sprintf("read chunks %s: changed since the scan", name))
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Domain: errorDomain, Reason: reasonChanged, Metadata: map[string]string{"entry": name}}); err == nil {
		st = d
	}
	return st.Err()
}

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
func (c *Client) ReadChunks(ctx context.Context, dir string, reads []*agentv1.ChunkRead, compress frame.Mode, fn func(i int, plaintext []byte) error) (int64, error) {
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
func (c *Client) ReadChunksStored(ctx context.Context, dir string, reads []*agentv1.ChunkRead, compress frame.Mode, fn func(i int, plaintext, zstd []byte) error) (int64, error) {
	if dir == "" {
		dir = "."
	}
	op := fmt.Sprintf("read %d chunks from %s", len(reads), dir)
	if err := checkRemotePath("read chunks", dir); err != nil {
		return 0, err
	}
	mode, ok := compressions[compress]
	if !ok {
		return 0, fmt.Errorf("%s: unknown compression %v", op, compress)
	}
	if len(reads) > maxReads {
		return 0, fmt.Errorf("%s: %w: at most %d", op, archive.ErrLimit, maxReads)
	}
	for i, r := range reads {
		if err := checkRemotePath("read chunks", r.GetPath()); err != nil {
			return 0, err
		}
		if r.GetSize() < 1 || r.GetSize() > maxChunk || r.GetOffset() < 0 || len(r.GetId()) != sha256.Size {
			return 0, fmt.Errorf("%s: read %d of %s: offset %d, size %d: %w", op, i, r.GetPath(), r.GetOffset(), r.GetSize(), ErrInvalidPath)
		}
	}
	if len(reads) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.ReadChunks(ctx, &agentv1.ReadChunksRequest{Dir: dir, Reads: reads, Compression: mode})
	if err != nil {
		return 0, c.callErr(op, err)
	}
	var wire int64
	var buf []byte
	for next := 0; ; next++ {
		m, err := stream.Recv()
		if err == io.EOF {
			if next != len(reads) {
				return wire, fmt.Errorf("%s: %w: the agent sent %d chunks, not %s at %d", op, archive.ErrDigest, next, reads[next].GetPath(), reads[next].GetOffset())
			}
			return wire, nil
		}
		if err != nil {
			return wire, c.readErr(op, err)
		}
		if next == len(reads) || int(m.GetIndex()) != next {
			return wire, fmt.Errorf("%s: %w: the agent sent chunk %d, want %d", op, archive.ErrDigest, m.GetIndex(), next)
		}
		r := reads[next]
		data := m.GetData()
		var stored []byte
		wire += int64(len(data))
		if int64(len(data)) > r.GetSize()+r.GetSize()/8+1024 || int64(len(data)) > r.GetSize() && !m.GetZstd() {
			return wire, fmt.Errorf("%s: %s at %d: %w: %d bytes for %d", op, r.GetPath(), r.GetOffset(), archive.ErrDigest, len(data), r.GetSize())
		}
		if m.GetZstd() {
			if cap(buf) < int(r.GetSize()+decodeSlack) {
				buf = make([]byte, 0, r.GetSize()+decodeSlack)
			}
			stored = data
			if data, err = chunkDecoder(r.GetSize()).DecodeAll(data, buf[:0:r.GetSize()+decodeSlack]); err != nil {
				return wire, fmt.Errorf("%s: %s at %d: %w: %v", op, r.GetPath(), r.GetOffset(), archive.ErrDigest, err)
			}
		}
		if int64(len(data)) != r.GetSize() {
			return wire, fmt.Errorf("%s: %s at %d: %w: %d bytes for %d", op, r.GetPath(), r.GetOffset(), archive.ErrDigest, len(data), r.GetSize())
		}
		if sum := sha256.Sum256(data); !bytes.Equal(sum[:], r.GetId()) {
			return wire, fmt.Errorf("%s: %s at %d: %w: SHA-256 differs from the scan's", op, r.GetPath(), r.GetOffset(), archive.ErrDigest)
		}
		if err := fn(next, data, stored); err != nil {
			return wire, err
		}
	}
}

// readErr is callErr that makes a changed file's failure match
// ErrChanged.
func (c *Client) readErr(op string, err error) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.FailedPrecondition {
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain && info.GetReason() == reasonChanged {
				re := fromStatus(err).(*RemoteError)
				re.kind = ErrChanged
				return c.wrap(op, re)
			}
		}
	}
	return c.callErr(op, err)
}
