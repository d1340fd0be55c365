package wire

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
)

// Magic opens every hello. Each byte has a reason:
//
//   - 0xFF is never valid in UTF-8 (nor in the ASCII of a login banner,
//     a motd or a shell's error message), so text cannot contain the magic
//     by accident; a channel that strips the eighth bit cannot match it.
//   - "FERRY" makes the hello findable in a hex dump.
//   - "\r\n" is there for the reason PNG's signature carries it (RFC 2083,
//     section 12.11): a pseudo-terminal between host and agent turns "\n"
//     into "\r\n" (ONLCR) or "\r" into "\n" (ICRNL), the magic no longer
//     matches, and the handshake fails with the mangled bytes in a
//     *NoMagicError instead of gRPC failing later on a corrupted frame.
//
// 0xFF occurs once, so the magic has no border and a mismatch never backs
// up; the search is KMP all the same, so that changing the magic cannot
// break it.
//
// The magic and the version field after it are frozen for all versions:
// whatever follows the version is defined by the version.
const Magic = "\xffFERRY\r\n"

// ProtocolVersion is the version of the agent protocol (this hello, then the
// gRPC service) this package speaks. Versions are compared for equality
// only: the host carries the agent that matches it and reinstalls any
// other, so no range of versions is ever negotiated.
const ProtocolVersion uint16 = 1

// HelloLen is the length of a version-1 hello on the wire: Magic, the
// version as a big-endian uint16, and the 32-byte digest.
const HelloLen = len(Magic) + 2 + sha256.Size

// DefaultMaxSkip is the banner a host tolerates before the agent's hello,
// the same bound as POSIX mode's stream marker (posix.MaxBanner).
const DefaultMaxSkip = 1 << 20

// Hello is the handshake that precedes the gRPC stream in each direction:
// the agent writes it first on its stdout, and the host first on the
// agent's stdin.
type Hello struct {
	// Version is the protocol version of the writer.
	Version uint16
	// Digest is the SHA-256 of the agent binary: in the agent's hello, its
	// own; in the host's, the one the host installed and expects. A host
	// that reads a digest other than that of the agent it carries is
	// talking to a stale agent of the same protocol version.
	Digest [sha256.Size]byte
}

// String is the hello for logs and error messages: the version and the
// first 12 hex digits of the digest.
func (h Hello) String() string {
	return fmt.Sprintf("agent protocol %d, sha256:%s", h.Version, hex.EncodeToString(h.Digest[:6]))
}

// Sentinels callers branch on. ReadHello's errors match one of these under
// errors.Is, are a *VersionError under errors.As, or wrap the reader's own
// error.
var (
	// ErrNoMagic means no Magic began within the bytes ReadHello may skip,
	// or the stream ended before one did. The error is a *NoMagicError
	// showing what came instead.
	ErrNoMagic = errors.New("agent: no hello magic")

	// ErrHelloTruncated means the stream ended after the magic and before the
	// end of the hello. It also matches io.ErrUnexpectedEOF.
	ErrHelloTruncated = errors.New("agent: truncated hello")
)

// NoMagicError reports output that holds no hello: usually the agent never
// started (a shell's "not found", a noexec mount) or a pseudo-terminal
// mangled the magic. errors.Is(err, ErrNoMagic) holds.
type NoMagicError struct {
	// Skipped is how many bytes ReadHello read and discarded.
	Skipped int
	// Head and Tail are the first and the last bytes of those, at most
	// 64 each; Tail is empty when Head holds all of them. The tail is what
	// a shell printed after its banner, often the actual reason.
	Head, Tail []byte
	// EOF is true when the stream ended; otherwise the bound on skipped
	// bytes was reached.
	EOF bool
}

func (e *NoMagicError) Error() string {
	var why string
	if e.EOF {
		why = fmt.Sprintf("output ended after %d bytes", e.Skipped)
	} else {
		why = fmt.Sprintf("none in the first %d bytes of output", e.Skipped)
	}
	if e.Skipped == 0 {
		return fmt.Sprintf("%v: %s", ErrNoMagic, why)
	}
	if len(e.Tail) == 0 {
		return fmt.Sprintf("%v: %s: %s", ErrNoMagic, why, strconv.QuoteToASCII(string(e.Head)))
	}
	return fmt.Sprintf("%v: %s: %s ... %s", ErrNoMagic, why,
		strconv.QuoteToASCII(string(e.Head)), strconv.QuoteToASCII(string(e.Tail)))
}

func (e *NoMagicError) Is(target error) bool { return target == ErrNoMagic }

// VersionError is a hello of another protocol version. The peer is an agent
// (or host) of another ferry release: the host reinstalls its own agent or
// fails with this error, never guesses.
type VersionError struct {
	Got, Want uint16
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("agent: protocol version %d, want %d", e.Got, e.Want)
}

// WriteHello writes h as one Write call of HelloLen bytes (atomic on a pipe,
// which takes up to PIPE_BUF bytes at once).
func WriteHello(w io.Writer, h Hello) error {
	var b [HelloLen]byte
	copy(b[:], Magic)
	binary.BigEndian.PutUint16(b[len(Magic):], h.Version)
	copy(b[len(Magic)+2:], h.Digest[:])
	n, err := w.Write(b[:])
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("write agent hello: %w", err)
	}
	return nil
}

// ReadHello reads the peer's hello from r. It discards whatever precedes
// Magic (a login shell's banner), at most maxSkip bytes of it (a negative
// maxSkip counts as 0), and never reads a byte past the end of the hello:
// the caller goes on reading the stream that follows from r itself, with no
// buffer to hand over.
//
// It reads at most maxSkip+HelloLen bytes, and gives up with ErrNoMagic as
// soon as no magic can begin within the first maxSkip bytes. A version
// other than ProtocolVersion is a *VersionError, returned as soon as the
// version is read, with the Hello holding only the version: the bytes after
// it are not read, since their layout is the other version's. Errors: a *NoMagicError
// (ErrNoMagic), ErrHelloTruncated, *VersionError, or the reader's own error
// wrapped; a reader that returns no data and no error 100 times in a row is
// io.ErrNoProgress.
//
// ReadHello takes no context, like io.ReadFull: a read blocked on the
// stream ends only when the stream does, so the caller bounds the
// handshake by closing the stream (the exec channel) on its deadline.
//
// Limitations: to never read past the hello without a buffer, it asks r
// for at most HelloLen bytes at a time while skipping a banner, that is
// one Read per 34 to 42 banner bytes.
func ReadHello(r io.Reader, maxSkip int) (Hello, error) {
	maxSkip = min(max(maxSkip, 0), math.MaxInt-HelloLen)
	var (
		buf   [HelloLen]byte
		read  int // bytes taken from r
		state int // how many bytes of Magic end what was read
		diag  diagnosis
	)
	for {
		// The earliest a magic can begin is state bytes back: a longer
		// partial match would have made state longer, a complete one ended
		// the loop.
		if read-state > maxSkip {
			return Hello{}, diag.err(read, false)
		}
		// So the hello ends HelloLen-state bytes from here at the soonest,
		// and the magic may begin at maxSkip at the latest.
		want := min(HelloLen-state, maxSkip+len(Magic)-read)
		n, err := readSome(r, buf[:want])
		diag.add(buf[:n])
		for i, c := range buf[:n] {
			state = advance(state, c)
			if state < len(Magic) {
				continue
			}
			// The rest of this read is the start of the hello's body.
			got := copy(buf[:], buf[i+1:n])
			return readBody(r, buf[:HelloLen-len(Magic)], got)
		}
		read += n
		if err == io.EOF {
			return Hello{}, diag.err(read, true)
		}
		if err != nil {
			return Hello{}, fmt.Errorf("read agent hello: %w", err)
		}
	}
}

// readBody reads the version and the digest into body, whose first got
// bytes are already there, checking the version before reading the digest.
func readBody(r io.Reader, body []byte, got int) (Hello, error) {
	if got < 2 {
		if err := readFull(r, body[got:2], got); err != nil {
			return Hello{}, err
		}
		got = 2
	}
	var h Hello
	h.Version = binary.BigEndian.Uint16(body)
	if h.Version != ProtocolVersion {
		return h, &VersionError{Got: h.Version, Want: ProtocolVersion}
	}
	if err := readFull(r, body[got:], got); err != nil {
		return Hello{}, err
	}
	copy(h.Digest[:], body[2:])
	return h, nil
}

// readFull fills p, which starts off bytes after the magic.
func readFull(r io.Reader, p []byte, off int) error {
	for len(p) > 0 {
		n, err := readSome(r, p)
		p, off = p[n:], off+n
		if len(p) == 0 {
			return nil
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return fmt.Errorf("read agent hello: %w: %w after %d of %d bytes following the magic",
				ErrHelloTruncated, io.ErrUnexpectedEOF, off, HelloLen-len(Magic))
		}
		if err != nil {
			return fmt.Errorf("read agent hello: %w", err)
		}
	}
	return nil
}

// readSome reads into p until it gets a byte or an error, the way
// bufio.Reader guards against a reader that returns neither.
func readSome(r io.Reader, p []byte) (int, error) {
	for range 100 {
		n, err := r.Read(p)
		if n < 0 || n > len(p) {
			return 0, fmt.Errorf("reader returned %d bytes for a buffer of %d", n, len(p))
		}
		if n > 0 || err != nil {
			return n, err
		}
	}
	return 0, io.ErrNoProgress
}

// magicFail is the KMP failure function of Magic: magicFail[k] is the
// length of the longest proper prefix of Magic[:k+1] that is also its
// suffix.
var magicFail = func() [len(Magic)]int {
	var f [len(Magic)]int
	for i, k := 1, 0; i < len(Magic); i++ {
		for k > 0 && Magic[i] != Magic[k] {
			k = f[k-1]
		}
		if Magic[i] == Magic[k] {
			k++
		}
		f[i] = k
	}
	return f
}()

// advance is one KMP step: given that the last state bytes read are
// Magic[:state], it returns how many bytes of Magic end the stream after
// c. state is below len(Magic).
func advance(state int, c byte) int {
	for state > 0 && Magic[state] != c {
		state = magicFail[state-1]
	}
	if Magic[state] == c {
		state++
	}
	return state
}

// diagMax bounds Head and Tail of a NoMagicError.
const diagMax = 64

// diagnosis keeps the first and the last diagMax bytes skipped.
type diagnosis struct {
	head []byte
	tail [2 * diagMax]byte
	n    int // bytes in tail
	seen int // bytes passed to add
}

func (d *diagnosis) add(p []byte) {
	d.seen += len(p)
	if room := diagMax - len(d.head); room > 0 {
		d.head = append(d.head, p[:min(room, len(p))]...)
	}
	for len(p) > 0 {
		if d.n == len(d.tail) {
			d.n = copy(d.tail[:], d.tail[diagMax:])
		}
		c := copy(d.tail[d.n:], p)
		d.n += c
		p = p[c:]
	}
}

func (d *diagnosis) err(skipped int, eof bool) *NoMagicError {
	e := &NoMagicError{Skipped: skipped, Head: d.head, EOF: eof}
	if d.seen > diagMax {
		// Only the part of the tail that Head does not already show.
		k := min(d.n, diagMax, d.seen-diagMax)
		e.Tail = append([]byte(nil), d.tail[d.n-k:d.n]...)
	}
	return e
}
