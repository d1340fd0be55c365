package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"strings"
	"time"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A tree travels as Put and Get carry it: data messages holding a frame
// stream (package frame) of an archive made by archive.Writer with
// per-file digests (Put's in archive.FormatEntries, Get's a tar), then
// one Trailer, the last message. The receiver extracts with
// archive.Extract and, before anything is placed, checks that the frame
// stream ended with its own verified trailer right after the archive's
// end, that the Trailer message came next and
// last, and that the entries, bytes and every file's name, size and
// digest equal the Trailer's.

// ErrInvalidPath means a path or name was refused before any call: empty,
// holding NUL, newline or carriage return, or (a Get name) absolute or
// leading out of its directory.
var ErrInvalidPath = errors.New("agent: invalid path")

// CheckRemotePath refuses what no operation sends to the agent
// (DESIGN.md, "Rules everywhere").
func CheckRemotePath(op, p string) error {
	if p == "" {
		return fmt.Errorf("%s: %w: empty", op, ErrInvalidPath)
	}
	if strings.ContainsAny(p, "\x00\n\r") {
		return fmt.Errorf("%s %q: %w: contains NUL, newline or carriage return", op, p, ErrInvalidPath)
	}
	return nil
}

// MemberName checks a Get name and cleans it: "." for the directory's
// contents, or a relative path inside the directory (as POSIX mode takes
// it).
func MemberName(op, n string) (string, error) {
	if err := CheckRemotePath(op, n); err != nil {
		return "", err
	}
	c := path.Clean(n)
	if path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%s %q: %w: not a relative path inside the directory", op, n, ErrInvalidPath)
	}
	return c, nil
}

// TreeWriter is the sending side of a tree stream, Put's and Get's: an
// archive with per-file digests, framed and compressed, cut into data
// messages by send.
type TreeWriter struct {
	Chunks *ChunkWriter
	Frames *frame.Writer
	Tar    *archive.Writer
}

// NewTreeWriter starts a tree stream in archive format f; maxRatio 0 is
// the frame default. rtt, which may be nil, is the connection's round
// trip as its end has measured it (frame.WriterOptions.RTT).
func NewTreeWriter(send func([]byte) error, f archive.Format, mode frame.Mode, maxRatio int, rtt func() time.Duration) *TreeWriter {
	cw := &ChunkWriter{send: send}
	fw := frame.NewWriter(cw, frame.WriterOptions{Compress: mode, BlockSize: frameBlock, MaxRatio: maxRatio, NoDigest: true, WireCost: wireCost, Buffered: relayBuffered, RTT: rtt})
	tw := archive.NewWriterFormat(fw, f)
	tw.HashFiles()
	return &TreeWriter{Chunks: cw, Frames: fw, Tar: tw}
}

// Finish ends the archive and its framing and sends what is buffered.
func (t *TreeWriter) Finish() error {
	if err := t.Tar.Close(); err != nil {
		return err
	}
	if err := t.Frames.Close(); err != nil {
		return err
	}
	return t.Chunks.Flush()
}

// sendWhole is the least write ChunkWriter sends in messages of its own
// rather than gathering it: a frame block, which is what a stream's
// writes mostly are. Less than the stream's first block (64 KiB raw, see
// frame.WriterOptions.BlockSize), so that it leaves at once instead of
// waiting for the next.
const sendWhole = 32 << 10

// ChunkWriter cuts a byte stream into data messages of at most ChunkSize
// bytes: large writes as they come, small ones gathered. It reuses one
// buffer: send must be done with it when it returns, as a gRPC stream's
// Send is (it marshals the message before returning; only a stats
// handler or tracing, which these connections do not have, would keep
// it). Its error is sticky.
type ChunkWriter struct {
	send   func([]byte) error
	buf    []byte
	Wire   int64
	err    error
	Failed bool // send failed: the stream is over, its status tells why
}

func (c *ChunkWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n := len(p)
	if len(p) >= sendWhole {
		// What is gathered goes first, in a message of its own.
		if err := c.Flush(); err != nil {
			return 0, err
		}
	}
	for len(p) >= sendWhole {
		// A frame block (a few hundred KiB) goes out as it is: Send
		// copies it into the message, and a copy into buf first would
		// only add one.
		k := min(len(p), ChunkSize)
		if err := c.sendNow(p[:k]); err != nil {
			return n - len(p), err
		}
		p = p[k:]
	}
	for len(p) > 0 {
		if c.buf == nil {
			c.buf = make([]byte, 0, ChunkSize)
		}
		k := copy(c.buf[len(c.buf):cap(c.buf)], p)
		c.buf, p = c.buf[:len(c.buf)+k], p[k:]
		if len(c.buf) == cap(c.buf) {
			if err := c.Flush(); err != nil {
				return n - len(p) - k, err
			}
		}
	}
	return n, nil
}

// Flush sends what is buffered, if anything.
func (c *ChunkWriter) Flush() error {
	if c.err != nil || len(c.buf) == 0 {
		return c.err
	}
	b := c.buf
	c.buf = c.buf[:0]
	return c.sendNow(b)
}

// sendNow sends b as one message; send does not keep b.
func (c *ChunkWriter) sendNow(b []byte) error {
	if err := c.send(b); err != nil {
		c.err, c.Failed = err, true
		return err
	}
	c.Wire += int64(len(b))
	return nil
}

// errAfterTrailer and errEmptyData are protocol violations of the sender.
var (
	errAfterTrailer = errors.New("a message after the trailer")
	errEmptyData    = errors.New("an empty data message")
)

// MsgReader is the byte stream of a tree's data messages. It returns
// io.EOF after the Trailer message, once the message stream has ended too
// (the Trailer must be the last message), and also when the message stream
// ends without a Trailer (trailer then stays nil). recv returns one
// message's data or trailer, or the stream's error (io.EOF at its clean
// end).
type MsgReader struct {
	Recv func() ([]byte, *agentv1.Trailer, error)
	// Owned: Recv's data is the reader's alone (a received message's, see
	// codec.Unmarshal), to Release once read.
	Owned   bool
	buf     []byte // what is not read of the current message
	held    []byte // the current message's data, until released
	Trailer *agentv1.Trailer
	Wire    int64
	err     error
	// Remote is the error Recv returned, other than a clean io.EOF: the
	// reason the stream ended (a status from the peer, a cancelled call).
	Remote error
}

func (r *MsgReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		// Every byte of held has been copied out; nothing else holds it.
		if r.held != nil {
			Release(r.held)
			r.held = nil
		}
		if r.err != nil {
			return 0, r.err
		}
		data, tr, err := r.Recv()
		switch {
		case err == io.EOF:
			r.err = io.EOF
		case err != nil:
			r.err, r.Remote = err, err
		case tr != nil:
			r.Trailer = tr
			switch _, _, err := r.Recv(); {
			case err == io.EOF:
				r.err = io.EOF
			case err != nil:
				r.err, r.Remote = err, err
			default:
				r.err = fmt.Errorf("%w: %w", archive.ErrDigest, errAfterTrailer)
			}
		case len(data) == 0:
			r.err = fmt.Errorf("%w: %w", archive.ErrDigest, errEmptyData)
		default:
			r.buf = data
			if r.Owned {
				r.held = data
			}
			r.Wire += int64(len(data))
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// TreeReader is the receiving side of a tree: a frame reader over the
// messages, the digests Extract reports, and the checks that end it.
type TreeReader struct {
	msgs   *MsgReader
	Frames *frame.Reader
	got    []archive.FileDigest
	// MinEntries is how many entries must arrive whatever the trailer
	// says: one per name asked for other than ".".
	MinEntries int64
}

func NewTreeReader(msgs *MsgReader, lim archive.Limits) *TreeReader {
	ratio := lim.MaxCompressionRatio
	if ratio == 0 {
		ratio = archive.DefaultLimits().MaxCompressionRatio
	}
	// NoDigest: the frame stream's SHA-256 would only repeat the
	// per-file digests checked against the Trailer; its CRC-32C stays.
	return &TreeReader{msgs: msgs, Frames: frame.NewReader(msgs, frame.ReaderOptions{MaxRatio: ratio, NoDigest: true})}
}

// onFile is ExtractOptions.OnFile.
func (t *TreeReader) OnFile(d archive.FileDigest) error {
	t.got = append(t.got, d)
	return nil
}

// verify is ExtractOptions.Verify: the archive has ended; the frame
// stream, the Trailer message and the tree must end with it and agree.
func (t *TreeReader) Verify(st archive.Stats) error {
	var b [512]byte
	switch n, err := t.Frames.Read(b[:]); {
	case n > 0:
		return fmt.Errorf("%w: data after the end of the archive", archive.ErrDigest)
	case err == io.EOF:
	case t.msgs.Remote != nil:
		return t.msgs.Remote
	case errors.Is(err, frame.ErrTruncated):
		return fmt.Errorf("%w: %w", archive.ErrTruncated, err)
	case errors.Is(err, frame.ErrCorrupt):
		return fmt.Errorf("%w: %w", archive.ErrDigest, err)
	default:
		return err
	}
	// The frame Reader stops right after its trailer: next is the Trailer
	// message, then the end of the messages.
	switch n, err := t.msgs.Read(b[:]); {
	case n > 0:
		return fmt.Errorf("%w: data after the end of the frame stream", archive.ErrDigest)
	case err != io.EOF:
		return err
	case t.msgs.Trailer == nil:
		return fmt.Errorf("%w: the stream ends without a trailer", archive.ErrTruncated)
	}
	got := st.Files + st.Dirs + st.Symlinks
	if got < t.MinEntries {
		return fmt.Errorf("%w: %d entries arrived, at least %d were asked for", archive.ErrShort, got, t.MinEntries)
	}
	return CheckTrailer(st, t.got, t.msgs.Trailer)
}

// CheckTrailer compares what arrived with what the sender's trailer says
// it sent. Fewer entries is archive.ErrShort; any other difference is
// archive.ErrDigest, as an *archive.EntryError naming the file when one
// file is at fault.
func CheckTrailer(st archive.Stats, got []archive.FileDigest, tr *agentv1.Trailer) error {
	entries := st.Files + st.Dirs + st.Symlinks
	switch {
	case entries < tr.GetEntries():
		return fmt.Errorf("%w: %d entries arrived, the sender counted %d", archive.ErrShort, entries, tr.GetEntries())
	case entries > tr.GetEntries():
		return fmt.Errorf("%w: %d entries arrived, the sender counted %d", archive.ErrDigest, entries, tr.GetEntries())
	}
	want := tr.GetFiles()
	for i := range max(len(got), len(want)) {
		if i >= len(want) {
			return digestErr(got[i].Name, "not in the sender's trailer")
		}
		w := want[i]
		if i >= len(got) {
			return digestErr(w.GetName(), "in the sender's trailer, did not arrive")
		}
		g := got[i]
		switch {
		case g.Name != w.GetName():
			return digestErr(g.Name, fmt.Sprintf("the sender's trailer has %q in its place", clipName(w.GetName())))
		case g.Size != w.GetSize():
			return digestErr(g.Name, fmt.Sprintf("%d bytes arrived, the sender wrote %d", g.Size, w.GetSize()))
		case !bytes.Equal(g.Sum[:], w.GetDigest()):
			return digestErr(g.Name, "its digest differs from the sender's")
		}
	}
	if st.Bytes != tr.GetBytes() {
		return fmt.Errorf("%w: %d bytes arrived, the sender wrote %d", archive.ErrDigest, st.Bytes, tr.GetBytes())
	}
	return nil
}

func digestErr(name, why string) error {
	return &archive.EntryError{Entry: name, Op: "verify", Err: fmt.Errorf("%w: %s", archive.ErrDigest, why)}
}

func clipName(s string) string {
	const max = 256
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// TrailerOf is the Trailer for what w wrote.
func TrailerOf(w *archive.Writer) *agentv1.Trailer {
	st := w.Stats()
	files := make([]*agentv1.FileDigest, len(w.Digests()))
	for i, d := range w.Digests() {
		files[i] = &agentv1.FileDigest{Name: d.Name, Size: d.Size, Digest: bytes.Clone(d.Sum[:])}
	}
	return &agentv1.Trailer{Entries: st.Files + st.Dirs + st.Symlinks, Bytes: st.Bytes, Files: files}
}

// FrameRatio is the MaxRatio that a frame Writer must keep to for a
// receiver with these limits.
func FrameRatio(lim archive.Limits) int {
	if lim.MaxCompressionRatio == 0 {
		return archive.DefaultLimits().MaxCompressionRatio
	}
	return lim.MaxCompressionRatio
}

func LimitsToProto(l archive.Limits) *agentv1.Limits {
	return &agentv1.Limits{
		MaxBytes:     l.MaxTotalBytes,
		MaxEntries:   l.MaxEntries,
		MaxFileBytes: l.MaxFileSize,
		MaxRatio:     int64(l.MaxCompressionRatio),
	}
}

func LimitsFromProto(l *agentv1.Limits) (archive.Limits, error) {
	if l.GetMaxBytes() < 0 || l.GetMaxEntries() < 0 || l.GetMaxFileBytes() < 0 || l.GetMaxRatio() < 0 || l.GetMaxRatio() > math.MaxInt32 {
		return archive.Limits{}, fmt.Errorf("limits out of range: %v", l)
	}
	return archive.Limits{
		MaxTotalBytes:       l.GetMaxBytes(),
		MaxEntries:          l.GetMaxEntries(),
		MaxFileSize:         l.GetMaxFileBytes(),
		MaxCompressionRatio: int(l.GetMaxRatio()),
	}, nil
}

var Placements = map[archive.Placement]agentv1.Placement{
	archive.PlaceNew:  agentv1.Placement_PLACEMENT_NEW,
	archive.PlaceInto: agentv1.Placement_PLACEMENT_INTO,
	archive.PlaceAs:   agentv1.Placement_PLACEMENT_AS,
}

// Formats are the archive formats a tree stream may have.
var Formats = map[archive.Format]agentv1.ArchiveFormat{
	archive.FormatTar:     agentv1.ArchiveFormat_ARCHIVE_FORMAT_TAR,
	archive.FormatEntries: agentv1.ArchiveFormat_ARCHIVE_FORMAT_ENTRIES,
}

// FormatFromProto is the archive format a request names.
func FormatFromProto(op string, f agentv1.ArchiveFormat) (archive.Format, error) {
	for k, v := range Formats {
		if v == f {
			return k, nil
		}
	}
	return 0, status.Errorf(codes.InvalidArgument, "%s: unknown archive format %v", op, f)
}

var Compressions = map[frame.Mode]agentv1.Compression{
	frame.Auto: agentv1.Compression_COMPRESSION_AUTO,
	frame.Zstd: agentv1.Compression_COMPRESSION_ZSTD,
	frame.None: agentv1.Compression_COMPRESSION_NONE,
	frame.S2:   agentv1.Compression_COMPRESSION_S2,
}
