package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/cdc"
)

// Bounds of a Scan and a ReadChunks call.
const (
	// maxChunk bounds ChunkParams.max and one ChunkRead: the agent holds
	// two chunks of the chunker and one read at a time.
	maxChunk = 4 << 20
	// maxKnown bounds ScanRequest.known.
	maxKnown = 1 << 20
	// maxFileChunks bounds one file's chunk list, which travels in one
	// ScanEntry: about 50 bytes a chunk keeps an entry well under
	// maxMessage. At the default 32 KiB average that is files of about
	// 32 GiB; a larger file fails the scan with ErrLimit.
	maxFileChunks = 1 << 20
	// scanBatch is the size a ScanResponse grows to before it is sent.
	scanBatch = 1 << 20
)

// oScan opens a file a scan reads: never through a final symlink (one
// swapped in after the walk saw a file), and never blocking on a FIFO
// swapped in the same way.
const oScan = os.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK

// Scan walks req.dir as session.DirSource walks a local directory, so that
// a save through the agent and one of the same tree on the host give the
// same manifest: fs.WalkDir over an os.Root (lexical order, a directory
// before its contents, symlinks reported and never followed), the root
// itself not reported. Sockets, FIFOs and devices are skipped, not
// reported: a session cannot carry them. A regular file is read once,
// through the root and without following a final symlink, cut by the
// chunker and each chunk hashed with SHA-256; its mode and mtime then come
// from the open file. A regular file whose lstat size and mtime equal a
// known file's is reported unchanged and not opened.
func (s *server) Scan(req *agentv1.ScanRequest, stream agentv1.Agent_ScanServer) error {
	return toStatus(s.scan(stream.Context(), req, stream.Send))
}

func (s *server) scan(ctx context.Context, req *agentv1.ScanRequest, send func(*agentv1.ScanResponse) error) error {
	rd := req.GetDir()
	if rd == "" {
		rd = "."
	}
	if err := checkRemotePath("scan", rd); err != nil {
		return err
	}
	p, err := chunkParams(req.GetParams())
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "scan %s: %v", rd, err)
	}
	if len(req.GetKnown()) > maxKnown {
		return fmt.Errorf("scan %s: %w: %d known files, at most %d", rd, transfer.ErrLimit, len(req.GetKnown()), maxKnown)
	}
	type stamp struct{ size, mtime int64 }
	known := make(map[string]stamp, len(req.GetKnown()))
	for _, k := range req.GetKnown() {
		known[k.GetPath()] = stamp{k.GetSize(), k.GetMtimeUnixNano()}
	}
	dir := s.abs(rd)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()

	ch := cdc.New(nil, p)
	resp := &agentv1.ScanResponse{}
	size := 0
	flush := func() error {
		if len(resp.Entries) == 0 {
			return nil
		}
		err := send(resp)
		resp.Entries, size = resp.Entries[:0], 0
		return err
	}
	err = fs.WalkDir(root.FS(), ".", func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		e := &agentv1.ScanEntry{Path: p, Mode: unixMode(fi.Mode()), MtimeUnixNano: fi.ModTime().UnixNano()}
		switch m := fi.Mode(); {
		case m.IsDir():
			e.Kind = agentv1.Kind_KIND_DIR
		case m&fs.ModeSymlink != 0:
			e.Kind = agentv1.Kind_KIND_SYMLINK
			if e.Target, err = root.Readlink(p); err != nil {
				return err
			}
		case m.IsRegular():
			e.Kind = agentv1.Kind_KIND_FILE
			if k, ok := known[p]; ok && k.size == fi.Size() && k.mtime == e.MtimeUnixNano {
				e.Size, e.Unchanged = fi.Size(), true
			} else if err := chunkFile(ctx, root, ch, e); err != nil {
				return &fs.PathError{Op: "scan", Path: filepath.Join(dir, p), Err: err}
			}
		default:
			return nil
		}
		resp.Entries = append(resp.Entries, e)
		if size += proto.Size(e); size >= scanBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return err
}

// chunkFile reads the file e.Path once and fills in e's chunks and size,
// and its mode and mtime from the open file.
func chunkFile(ctx context.Context, root *os.Root, ch *cdc.Chunker, e *agentv1.ScanEntry) error {
	f, err := root.OpenFile(e.Path, oScan, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return errors.New("changed type while scanning")
	}
	e.Mode, e.MtimeUnixNano = unixMode(fi.Mode()), fi.ModTime().UnixNano()
	ch.Reset(f)
	for {
		data, err := ch.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(e.Chunks) == maxFileChunks {
			return fmt.Errorf("%w: over %d chunks", transfer.ErrLimit, maxFileChunks)
		}
		sum := sha256.Sum256(data)
		e.Chunks = append(e.Chunks, &agentv1.ChunkInfo{Id: sum[:], Offset: e.Size, Size: int64(len(data))})
		e.Size += int64(len(data))
	}
}

// chunkParams is the chunker a ScanRequest asks for: all zero is
// cdc.Default.
func chunkParams(cp *agentv1.ChunkParams) (cdc.Params, error) {
	if cp.GetMin() == 0 && cp.GetAvg() == 0 && cp.GetMax() == 0 {
		return cdc.Default, nil
	}
	p := cdc.Params{Min: int(cp.GetMin()), Avg: int(cp.GetAvg()), Max: int(cp.GetMax())}
	if err := p.Validate(); err != nil {
		return p, err
	}
	if p.Max > maxChunk {
		return p, fmt.Errorf("chunk params: max %d over %d", p.Max, maxChunk)
	}
	return p, nil
}

// Scan lists dir in the sandbox (relative paths start at the workspace) for
// a session save, calling fn with each entry in walk order (a directory
// before its contents): see the Scan RPC. known are the files the host
// holds chunk lists for; each whose size and mtime are unchanged comes
// back with Unchanged set and no chunks. params are the chunker's (the
// zero value is cdc.Default). fn's error ends the scan and is returned.
//
// The agent may be hostile: fn gets the entries as the agent sent them,
// unchecked; the caller validates them (package session's AgentSource
// does).
func (c *Client) Scan(ctx context.Context, dir string, known []*agentv1.KnownFile, params cdc.Params, fn func(*agentv1.ScanEntry) error) error {
	if dir == "" {
		dir = "."
	}
	op := "scan " + dir
	if err := checkRemotePath("scan", dir); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Scan(ctx, &agentv1.ScanRequest{
		Dir:    dir,
		Known:  known,
		Params: &agentv1.ChunkParams{Min: int32(params.Min), Avg: int32(params.Avg), Max: int32(params.Max)},
	})
	if err != nil {
		return c.callErr(op, err)
	}
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return c.callErr(op, err)
		}
		for _, e := range m.GetEntries() {
			if err := fn(e); err != nil {
				return err
			}
		}
	}
}
