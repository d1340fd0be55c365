package session

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// Manifests are written and read as streams, one entry at a time, so that
// neither the JSON nor the compressed object of a large tree is ever whole
// in memory: a save writes its manifest straight into the backend's Put,
// a load decodes it straight from the backend's Get. The stored form is
// unchanged (zstd-compressed JSON, format 1) and readable by older code;
// only the zstd frame differs, with a window of manifestWindow where
// EncodeAll made the window the whole content. Old manifests read as
// before, their one-frame window costing their decoded size once.

// manifestWindow is the zstd window of a manifest: what a reader holds of
// its decoded JSON at a time.
const manifestWindow = 1 << 20

// maxManifestHeader bounds a manifest's fields other than its entries.
const maxManifestHeader = 64 << 10

// writeManifest writes m's stored form to w: its fields, then the entries
// that each yields, in order, then the end. It refuses a manifest over
// the limits a reader applies (maxManifestDecoded of JSON,
// maxManifestStored stored) with an error matching ErrManifest; what it
// wrote up to then is to be thrown away. each's error is returned as it
// is.
func writeManifest(w io.Writer, m *Manifest, each func(yield func(*Entry) error) error) error {
	stored := &capWriter{w: w, max: maxManifestStored, what: "stored bytes"}
	zw, err := zstd.NewWriter(stored, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(manifestWindow))
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	defer zw.Close()
	bw := bufio.NewWriterSize(zw, 64<<10)
	js := &capWriter{w: bw, max: maxManifestDecoded, what: "JSON"}
	head := *m
	head.Entries = nil
	b, err := json.Marshal(&head)
	const tail = `"entries":null}`
	if err != nil || !bytes.HasSuffix(b, []byte(tail)) {
		return fmt.Errorf("encode manifest: %v, or entries are not its last field", err)
	}
	if _, err := js.Write(append(b[:len(b)-len("null}")], '[')); err != nil {
		return err
	}
	first := true
	err = each(func(e *Entry) error {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encode manifest: entry %q: %w", e.Path, err)
		}
		if !first {
			b = append([]byte{','}, b...)
		}
		first = false
		_, err = js.Write(b)
		return err
	})
	if err != nil {
		return err
	}
	if _, err := js.Write([]byte("]}")); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return zw.Close()
}

// capWriter writes to w up to max bytes; past them it fails with an
// error matching ErrManifest.
type capWriter struct {
	w    io.Writer
	n    int64
	max  int64
	what string
}

func (c *capWriter) Write(p []byte) (int, error) {
	if c.n += int64(len(p)); c.n > c.max {
		return 0, fmt.Errorf("%w: over %d bytes of %s", ErrManifest, c.max, c.what)
	}
	return c.w.Write(p)
}

// readManifest reads a stored manifest from r and validates it as
// untrusted input as it goes (see entryChecker), calling fn with each entry,
// in order, once the entry itself has passed; the totals and the fields
// are checked at the end, so that a failure then still fails the read.
// The Manifest returned has no Entries. Every error matches ErrManifest,
// but r's, which are wrapped, and fn's, which are returned as they are.
func readManifest(r io.Reader, fn func(*Entry) error) (*Manifest, error) {
	in := &capReader{r: r, max: maxManifestStored, what: "stored bytes"}
	zr, err := zstd.NewReader(in, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxManifestDecoded))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	defer zr.Close()
	js := &capReader{r: zr, max: maxManifestDecoded, what: "JSON"}
	m, err := readManifestJSON(&compactReader{r: js}, fn)
	var fe fnError
	switch {
	case err == nil:
		return m, nil
	case errors.As(err, &fe):
		return nil, fe.err
	case in.err != nil:
		return nil, fmt.Errorf("read manifest: %w", in.err)
	case errors.Is(err, ErrManifest):
		return nil, err
	case js.err != nil:
		return nil, fmt.Errorf("%w: decompress: %v", ErrManifest, js.err)
	}
	return nil, fmt.Errorf("%w: %v", ErrManifest, err)
}

// fnError carries readManifest's fn's error through the JSON reader.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }

// capReader reads r up to max bytes; past them it fails with an error
// matching ErrManifest. err is r's own error, other than io.EOF.
type capReader struct {
	r    io.Reader
	n    int64
	max  int64
	what string
	err  error
}

func (c *capReader) Read(p []byte) (int, error) {
	// One byte past max tells a manifest of exactly max bytes from a
	// larger one.
	if left := c.max + 1 - c.n; int64(len(p)) > left {
		p = p[:max(left, 0)]
	}
	n, err := c.r.Read(p)
	if c.n += int64(n); c.n > c.max {
		return 0, fmt.Errorf("%w: over %d bytes of %s", ErrManifest, c.max, c.what)
	}
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}

// compactReader passes JSON on without the whitespace between tokens,
// which no writer of manifests emits: encoding/json's Decoder scans a run
// of it from its start again at each refill of its buffer, so that a
// manifest of a few hundred MiB of spaces (some KB stored) would keep a
// reader busy for hours. Whitespace inside strings is kept.
type compactReader struct {
	r        io.Reader
	inString bool
	escaped  bool
}

func (c *compactReader) Read(p []byte) (int, error) {
	for {
		n, err := c.r.Read(p)
		k := 0
		for _, b := range p[:n] {
			switch {
			case c.inString:
				switch {
				case c.escaped:
					c.escaped = false
				case b == '\\':
					c.escaped = true
				case b == '"':
					c.inString = false
				}
			case b == '"':
				c.inString = true
			case b == ' ' || b == '\t' || b == '\n' || b == '\r':
				continue
			}
			p[k] = b
			k++
		}
		if k > 0 || err != nil || n == 0 {
			return k, err
		}
	}
}

// readManifestJSON is readManifest after the decompression.
func readManifestJSON(r io.Reader, fn func(*Entry) error) (*Manifest, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := delim(dec, '{'); err != nil {
		return nil, err
	}
	var head bytes.Buffer
	head.WriteByte('{')
	var ck entryChecker
	sawEntries := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		if strings.EqualFold(name, "entries") {
			if name != "entries" || sawEntries {
				return nil, fmt.Errorf("%w: field %q", ErrManifest, name)
			}
			sawEntries = true
			if err := readEntries(dec, &ck, fn); err != nil {
				return nil, err
			}
			continue
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		if head.Len()+len(name)+len(raw) > maxManifestHeader {
			return nil, fmt.Errorf("%w: fields over %d bytes", ErrManifest, maxManifestHeader)
		}
		if head.Len() > 1 {
			head.WriteByte(',')
		}
		k, _ := json.Marshal(name)
		head.Write(k)
		head.WriteByte(':')
		head.Write(raw)
	}
	if err := delim(dec, '}'); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the manifest", ErrManifest)
	}
	head.WriteByte('}')
	hd := json.NewDecoder(&head)
	hd.DisallowUnknownFields()
	var m Manifest
	if err := hd.Decode(&m); err != nil {
		return nil, err
	}
	m.Entries = nil
	if err := m.validateHeader(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	if err := ck.totals(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	return &m, nil
}

// readEntries reads the entries array (or null), checking each entry.
func readEntries(dec *json.Decoder, ck *entryChecker, fn func(*Entry) error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	if tok != json.Delim('[') {
		return fmt.Errorf("%w: entries are not a list", ErrManifest)
	}
	for dec.More() {
		var e Entry
		if err := dec.Decode(&e); err != nil {
			return err
		}
		if err := ck.check(&e); err != nil {
			return fmt.Errorf("%w: %v", ErrManifest, err)
		}
		if fn != nil {
			if err := fn(&e); err != nil {
				return fnError{err}
			}
		}
	}
	return delim(dec, ']')
}

func delim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != want {
		return fmt.Errorf("%w: want %v, got %v", ErrManifest, want, tok)
	}
	return nil
}

// entryChecker checks a manifest's entries one at a time, in order, for
// what a reader relies on: entries sorted by path (so no duplicates),
// clean relative paths whose parent is a directory entry (so nothing is
// ever written through a symlink), kinds with only their own fields,
// permission-only modes, file sizes equal to the sum of their chunks; and
// adds up their totals, which must match the header's. It holds the paths
// of the directories it has seen: a reader must know that each entry's
// parent is one.
type entryChecker struct {
	n                          int
	last                       string
	dirs                       map[string]bool
	files, ndirs, links, total int64
}

func (c *entryChecker) check(e *Entry) error {
	if err := e.validate(); err != nil {
		return err
	}
	if c.n++; c.n > maxEntries {
		return fmt.Errorf("over %d entries", maxEntries)
	}
	if c.n > 1 && c.last >= e.Path {
		return fmt.Errorf("entry %q: out of order or duplicate", e.Path)
	}
	c.last = e.Path
	if c.dirs == nil {
		c.dirs = map[string]bool{".": true}
	}
	if !c.dirs[path.Dir(e.Path)] {
		return fmt.Errorf("entry %q: parent is not a directory entry", e.Path)
	}
	switch e.Kind {
	case KindDir:
		c.dirs[e.Path] = true
		c.ndirs++
	case KindFile:
		c.files++
		if c.total += e.Size; c.total < 0 {
			return fmt.Errorf("entry %q: total size overflows", e.Path)
		}
	case KindSymlink:
		c.links++
	}
	return nil
}

// totals checks m's totals against the entries checked.
func (c *entryChecker) totals(m *Manifest) error {
	if c.files != m.Files || c.ndirs != m.Dirs || c.links != m.Symlinks || c.total != m.Bytes {
		return fmt.Errorf("totals %d files, %d dirs, %d symlinks, %d bytes; entries add up to %d, %d, %d, %d",
			m.Files, m.Dirs, m.Symlinks, m.Bytes, c.files, c.ndirs, c.links, c.total)
	}
	return nil
}
