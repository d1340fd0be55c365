package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferry-dev/ferry/internal/fdfile"
	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// zstdKeep is AUTO's threshold: a chunk travels compressed only when that
// takes at most 97% of its size.
const zstdKeep = 97

// ReadChunks sends each requested range, in request order, once its
// SHA-256 equals the id asked for; otherwise the call fails with
// FailedPrecondition (ErrChanged on the host) naming the file. Files are
// opened through an os.Root at req.dir without following a final
// symlink, so no path leads out of dir. One chunk is in memory at a time
// (plus its compressed form).
func (s *server) ReadChunks(req *agentv1.ReadChunksRequest, stream agentv1.Agent_ReadChunksServer) error {
	return wire.ToStatus(s.readChunks(stream.Context(), req, stream.Send))
}

func (s *server) readChunks(ctx context.Context, req *agentv1.ReadChunksRequest, send func(*agentv1.ReadChunksResponse) error) error {
	rd := req.GetDir()
	if rd == "" {
		rd = "."
	}
	if err := wire.CheckRemotePath("read chunks", rd); err != nil {
		return err
	}
	comp := req.GetCompression()
	if _, ok := agentv1.Compression_name[int32(comp)]; !ok {
		return status.Errorf(codes.InvalidArgument, "read chunks %s: unknown compression %v", rd, comp)
	}
	if len(req.GetReads()) > wire.MaxReads {
		return fmt.Errorf("read chunks %s: %w: %d reads, at most %d", rd, archive.ErrLimit, len(req.GetReads()), wire.MaxReads)
	}
	dir := s.abs(rd)
	root, err := openRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()

	op := &fileOpener{dir: fdfile.HeldDir{Root: root}}
	defer op.close()
	var f *scanFile
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
		if r.GetSize() < 1 || r.GetSize() > wire.MaxChunk || r.GetOffset() < 0 || len(r.GetId()) != sha256.Size {
			return status.Errorf(codes.InvalidArgument, "read chunks %s: read %d: offset %d, size %d, id of %d bytes",
				name, i, r.GetOffset(), r.GetSize(), len(r.GetId()))
		}
		if f == nil || open != r.GetPath() {
			if f != nil {
				f.Close()
				f = nil
			}
			if err := wire.CheckRemotePath("read chunks", r.GetPath()); err != nil {
				return err
			}
			if f, err = op.open(r.GetPath()); err != nil {
				return err
			}
			open = r.GetPath()
			if regular, _, _, err := f.stat(); err != nil {
				return &fs.PathError{Op: "read chunks", Path: name, Err: err}
			} else if !regular {
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
			z = wire.ChunkEncoder.EncodeAll(buf, z[:0])
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
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Domain: wire.ErrorDomain, Reason: wire.ReasonChanged, Metadata: map[string]string{"entry": name}}); err == nil {
		st = d
	}
	return st.Err()
}
