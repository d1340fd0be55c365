package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"iter"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/cdc"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// Scan lists dir in the sandbox (relative paths start at the workspace) for
// a session save, calling fn with each entry in walk order (a directory
// before its contents): see the ScanStream RPC. known are the files the
// host holds chunk lists for, in strictly ascending walk order
// (archive.CompareWalk); each whose size and mtime are unchanged comes
// back with Unchanged set and no chunks. They are streamed to the agent as
// its walk reaches them, in batches of knownBatch, so that neither side
// holds the whole list; known is read from a goroutine of Scan's, which
// has returned when Scan does, and its error ends the scan and is
// returned. A nil known is none. opts are the chunker's params and the
// inline chunks the agent may send (see ScanOptions). fn's error ends the
// scan and is returned.
//
// The agent may be hostile: fn gets the entries as the agent sent them,
// unchecked but for what ScanEntry cannot hold (a kind the protocol does
// not define, a chunk id that is not a SHA-256), which ends the scan with
// an *archive.EntryError naming the entry and matching ErrBadAnswer; the
// caller validates the rest (package session's AgentSource does).
func (c *Client) Scan(ctx context.Context, dir string, known iter.Seq2[KnownFile, error], opts ScanOptions, fn func(ScanEntry) error) error {
	if dir == "" {
		dir = "."
	}
	op := "scan " + dir
	if err := wire.CheckRemotePath("scan", dir); err != nil {
		return err
	}
	comp, ok := wire.Compressions[opts.Compress]
	if !ok {
		return fmt.Errorf("%s: unknown compression %v", op, opts.Compress)
	}
	params := opts.Params
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.ScanStream(ctx)
	if err != nil {
		return c.callErr(op, err)
	}
	first := &agentv1.ScanRequest{
		Dir:               dir,
		Params:            &agentv1.ChunkParams{Min: int32(params.Min), Avg: int32(params.Avg), Max: int32(params.Max)},
		InlineBytes:       opts.InlineBytes,
		InlineCompression: comp,
	}
	sent := make(chan error, 1)
	go func() {
		err := sendKnown(stream, first, known)
		if err != nil {
			cancel()
		}
		sent <- err
	}()
	err = recvScan(stream, fn)
	// Whatever ended the receiving ends the sending: a scan that is over
	// reads no more known files.
	cancel()
	if kerr := <-sent; kerr != nil {
		return fmt.Errorf("%s: %w", op, kerr)
	}
	var fe fnError
	if errors.As(err, &fe) {
		return fe.err
	}
	if err != nil {
		return c.callErr(op, err)
	}
	return nil
}

// knownBatch is how many known files one ScanStream request carries at
// most, about 100 KiB of them.
const knownBatch = 2048

// sendKnown sends first, then known in batches, then half-closes. It
// returns only known's error: one of the stream's ends the receiving too,
// which reports it.
func sendKnown(stream agentv1.Agent_ScanStreamClient, first *agentv1.ScanRequest, known iter.Seq2[KnownFile, error]) error {
	req := first
	if known != nil {
		for k, err := range known {
			if err != nil {
				return err
			}
			req.Known = append(req.Known, &agentv1.KnownFile{Path: k.Path, Size: k.Size, MtimeUnixNano: k.MTime})
			if len(req.Known) == knownBatch {
				if stream.Send(req) != nil {
					return nil
				}
				req = &agentv1.ScanRequest{Known: req.Known[:0]}
			}
		}
	}
	if stream.Send(req) != nil {
		return nil
	}
	stream.CloseSend()
	return nil
}

// KnownFile is a file the host holds a chunk list for: Scan reports it
// Unchanged, without chunks, when its size and mtime are.
type KnownFile struct {
	Path  string
	Size  int64
	MTime int64 // Unix nanoseconds
}

// ScanEntry is one entry of a Scan, as the agent reported it: its claims,
// which the caller checks.
type ScanEntry struct {
	Path string
	Kind archive.Kind
	// Mode is as the agent sent it: permission bits, setuid, setgid and
	// sticky (archive.ModeBits), and whatever else a hostile agent set.
	Mode      uint32
	MTime     int64 // Unix nanoseconds
	Size      int64
	Target    string // of a Symlink
	Unchanged bool   // a known file, same size and mtime; no Chunks
	Chunks    []Chunk
}

// Chunk is one content-defined chunk of a scanned file: where it lies in
// the file and the SHA-256 of its bytes.
type Chunk struct {
	Offset, Size int64
	ID           [sha256.Size]byte
	// inline is the chunk as the agent sent it with the entry (ScanOptions
	// .InlineBytes), unchecked: Inline checks it. Valid only during the
	// call of Scan's fn.
	inline []byte
	zstd   bool
}

// Inline returns the chunk's plaintext and, when it came compressed, its
// zstd frame as it came, if the agent sent the chunk with its entry (ok
// false when not), checked against its size and id: an error matches
// archive.ErrDigest. buf is storage for the plaintext, grown as needed
// and returned. Both slices are valid only during the call of Scan's fn.
func (c Chunk) Inline(buf []byte) (plain, stored, _ []byte, ok bool, err error) {
	if c.inline == nil {
		return nil, nil, buf, false, nil
	}
	plain, stored, buf, err = checkChunk(c.Size, c.ID, c.inline, c.zstd, buf)
	return plain, stored, buf, true, err
}

// InlineSize is the bytes of the chunk that came with its entry: what
// crossed the wire for it, whether or not Inline is asked.
func (c Chunk) InlineSize() int64 { return int64(len(c.inline)) }

// ScanOptions are a Scan's choices beyond the defaults.
type ScanOptions struct {
	// Params are the chunker's (the zero value is cdc.Default()).
	Params cdc.Params
	// InlineBytes is how many bytes of chunks, at most, the agent may send
	// with their entries, where the host cannot hold them already: a new
	// file's, and an appended file's past its known size. A save of a
	// small change then needs no ReadChunks call, and no round trip for
	// it. Zero: none.
	InlineBytes int64
	// Compress is how inline chunks travel.
	Compress frame.Mode
}

// ErrBadAnswer matches an answer of the agent that the protocol cannot
// carry: a kind it does not define, a chunk id that is not a SHA-256. Only
// a hostile or broken agent sends one.
var ErrBadAnswer = errors.New("agent: answer outside the protocol")

// scanEntryOf converts what the agent sent, refusing what a ScanEntry
// cannot hold rather than fixing it.
func scanEntryOf(pe *agentv1.ScanEntry) (ScanEntry, error) {
	bad := func(format string, args ...any) (ScanEntry, error) {
		return ScanEntry{}, &archive.EntryError{Op: "scan", Entry: pe.GetPath(), Err: fmt.Errorf("%w: %s", ErrBadAnswer, fmt.Sprintf(format, args...))}
	}
	k, ok := kinds[pe.GetKind()]
	if !ok {
		return bad("kind %d", pe.GetKind())
	}
	e := ScanEntry{
		Path: pe.GetPath(), Kind: k, Mode: pe.GetMode(), MTime: pe.GetMtimeUnixNano(),
		Size: pe.GetSize(), Target: pe.GetTarget(), Unchanged: pe.GetUnchanged(),
	}
	if len(pe.GetChunks()) > 0 {
		e.Chunks = make([]Chunk, len(pe.GetChunks()))
	}
	for i, c := range pe.GetChunks() {
		if len(c.GetId()) != sha256.Size {
			return bad("chunk %d: id of %d bytes", i, len(c.GetId()))
		}
		e.Chunks[i] = Chunk{Offset: c.GetOffset(), Size: c.GetSize(), ID: [sha256.Size]byte(c.GetId()), inline: c.GetData(), zstd: c.GetZstd()}
	}
	return e, nil
}

// fnError carries Scan's fn's error out of recvScan.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }

func recvScan(stream agentv1.Agent_ScanStreamClient, fn func(ScanEntry) error) error {
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		for _, pe := range m.GetEntries() {
			e, err := scanEntryOf(pe)
			if err != nil {
				return fnError{err}
			}
			if err := fn(e); err != nil {
				return fnError{err}
			}
		}
	}
}
