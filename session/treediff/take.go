package treediff

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// Options says how Take lists a directory.
type Options struct {
	// Limits bound the directory as they bound a download of it (zero
	// fields: archive's defaults): entries, one file's size, the total,
	// path and target lengths, symlink chains.
	Limits archive.Limits
	// Since is the manifest the new one will be compared with, if known.
	// A file whose claimed digest is Since's while its mtime or size
	// moved is read through and checked against the chunk IDs the agent
	// claimed (agent mode; at most VerifyBytes of them), so that an agent
	// cannot hide a rewrite behind the old digest; with ContentCap, only
	// files whose digest differs from Since's keep their text.
	Since *Manifest
	// ContentCap, when positive, keeps the content of every text file of
	// at most this many bytes in Entry.Text, for unified diffs; at most
	// ContentTotal bytes in all (default 16 MiB), the rest counted in
	// Manifest.ContentOmitted. In agent mode that content is read through
	// the agent, each chunk checked against its ID.
	ContentCap, ContentTotal int64
	// VerifyBytes bounds the reads that check claimed digests (default
	// 64 MiB): past it, Take fails with archive.ErrLimit rather than
	// trusting the rest.
	VerifyBytes int64
}

func (o Options) withDefaults() (Options, error) {
	var err error
	if o.Limits, err = o.Limits.WithDefaults(); err != nil {
		return o, err
	}
	if o.ContentTotal == 0 {
		o.ContentTotal = 16 << 20
	}
	if o.VerifyBytes == 0 {
		o.VerifyBytes = 64 << 20
	}
	if o.ContentCap < 0 || o.ContentTotal < 0 || o.VerifyBytes < 0 {
		return o, errors.New("treediff: negative option")
	}
	return o, nil
}

// Take lists the directory dir of r's sandbox. In agent mode the agent
// walks and hashes it where it lies and no file content crosses the
// channel (but for what Options asks read); in POSIX mode the directory
// is downloaded whole into a private temp directory (0700, removed
// before Take returns), through the hardened extractor, and hashed here.
// A missing dir is an empty manifest, so that a run that creates the
// directory lists all of it as created.
//
// Every entry is checked (see the package doc); an error names the
// sandbox and dir, and the entry at fault, matching session.ErrAgent or
// ErrManifest for an answer no honest agent sends, archive.ErrLimit,
// archive.ErrLinkEscape, or agent.ErrChanged for a file whose bytes are
// not those the agent claimed.
func Take(ctx context.Context, r transfer.Remote, dir string, o Options) (*Manifest, error) {
	name := r.Target().Name
	m, err := take(ctx, r, dir, o)
	if err != nil {
		return nil, fmt.Errorf("manifest %s:%s: %w", name, dir, err)
	}
	m.Sandbox = name
	return m, nil
}

func take(ctx context.Context, r transfer.Remote, dir string, o Options) (*Manifest, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	m := &Manifest{Format: Format, Dir: dir, Time: time.Now().UTC(), Mode: r.Mode().String(), Entries: []Entry{}}
	kind, err := r.Stat(ctx, dir, true)
	if err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	switch kind {
	case archive.Dir:
	case archive.Missing:
		return m, nil
	default:
		return nil, transfer.ErrNotDir
	}
	if o.ContentCap > 0 {
		m.ContentCap = o.ContentCap
	}
	if c := r.Agent(); c != nil {
		src := &session.AgentSource{Client: c, Dir: dir, ListOnly: true}
		if m.Entries, err = collect(ctx, src, o.Limits); err != nil {
			return nil, err
		}
		rd := &agentReader{c: c, dir: dir, compress: r.Target().Compress}
		if err := keep(ctx, m, o, rd); err != nil {
			return nil, err
		}
		m.WireBytes = rd.wire
		return m, nil
	}
	m.MovedContents = true
	tmp, err := os.MkdirTemp("", "ferry-manifest-*")
	if err != nil {
		return nil, fmt.Errorf("download: %w", err)
	}
	defer archive.RemoveTree(tmp)
	local := filepath.Join(tmp, "tree")
	st, err := r.Download(ctx, transfer.DownloadSpec{Dir: dir, Names: []string{"."}, Local: local, Place: archive.PlaceNew, Limits: o.Limits})
	m.WireBytes = st.WireBytes
	if err != nil {
		return nil, fmt.Errorf("download: %w", err)
	}
	if m.Entries, err = collect(ctx, session.DirSource{Dir: local}, o.Limits); err != nil {
		return nil, err
	}
	if err := keep(ctx, m, o, localReader{root: local}); err != nil {
		return nil, err
	}
	return m, nil
}

// collect runs src's scan into a listing: each entry checked, chunk IDs
// kept, nothing stored.
func collect(ctx context.Context, src session.Source, lim archive.Limits) ([]Entry, error) {
	s := &listSink{ck: newChecker(lim), entries: []Entry{}}
	if err := src.Scan(ctx, nil, s); err != nil {
		return nil, err
	}
	if err := s.ck.finish(); err != nil {
		return nil, err
	}
	return s.entries, nil
}

// listSink is the session.Sink of a listing: Put hashes and forgets, Has
// holds nothing, Add checks and keeps the entry.
type listSink struct {
	mu      sync.Mutex
	ck      *checker
	entries []Entry
}

var _ session.Sink = (*listSink)(nil)

func (s *listSink) Has(context.Context, session.ID) (bool, error) { return false, nil }

func (s *listSink) Put(_ context.Context, data []byte) (session.ID, error) {
	return session.ID(sha256.Sum256(data)), nil
}

func (s *listSink) Add(se session.Entry) error {
	e := Entry{Path: se.Path, Mode: Perm(se.Mode.Perm()), MTime: se.MTime, Target: se.Target}
	switch se.Kind {
	case session.KindDir:
		e.Type = Dir
	case session.KindSymlink:
		e.Type = Symlink
	case session.KindFile:
		e.Type, e.Size, e.chunks = File, se.Size, se.Chunks
		e.Digest = digestOfChunks(se.Chunks)
	default:
		return entryErr(se.Path, "kind %q", se.Kind)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ck.add(&e); err != nil {
		return err
	}
	s.entries = append(s.entries, e)
	return nil
}

// contentReader reads listed files, checked against what the listing
// claims of them, and calls fn with each once read (with its content
// when whole).
type contentReader interface {
	read(ctx context.Context, files []*Entry, whole bool, fn func(e *Entry, data []byte) error) error
}

// keep reads what o asks of m's files: those whose claimed digest must
// be checked, and the small text files' content.
func keep(ctx context.Context, m *Manifest, o Options, rd contentReader) error {
	since := map[string]*Entry{}
	if o.Since != nil {
		for i := range o.Since.Entries {
			since[o.Since.Entries[i].Path] = &o.Since.Entries[i]
		}
	}
	var verify, text []*Entry
	var verifyBytes, textBytes int64
	for i := range m.Entries {
		e := &m.Entries[i]
		if e.Type != File {
			continue
		}
		old := since[e.Path]
		same := old != nil && old.Type == File && old.Digest == e.Digest
		if same && old.Size != e.Size {
			return entryErr(e.Path, "size %d with the digest of %d bytes", e.Size, old.Size)
		}
		if same && old.MTime != e.MTime && m.Mode == "agent" {
			if verifyBytes += e.Size; verifyBytes > o.VerifyBytes {
				return &archive.EntryError{Op: "manifest", Entry: e.Path, Err: fmt.Errorf("%w: over %d bytes of rewritten files to check", archive.ErrLimit, o.VerifyBytes)}
			}
			verify = append(verify, e)
		}
		if o.ContentCap > 0 && e.Size <= o.ContentCap && !same {
			if textBytes+e.Size > o.ContentTotal {
				m.ContentOmitted++
				continue
			}
			textBytes += e.Size
			text = append(text, e)
		}
	}
	if len(verify) > 0 {
		// The reads check each chunk against its claimed ID: a file
		// rewritten under an old digest fails them.
		err := rd.read(ctx, verify, false, func(*Entry, []byte) error { return nil })
		if err != nil {
			return fmt.Errorf("check a file whose mtime moved and digest did not: %w", err)
		}
	}
	if len(text) == 0 {
		return nil
	}
	return rd.read(ctx, text, true, func(e *Entry, data []byte) error {
		if isText(data) {
			s := string(data)
			e.Text = &s
		}
		return nil
	})
}

// Bounds of one ReadChunks call of agentReader.
const (
	maxReads     = 1024
	maxReadBytes = 32 << 20
)

// chunkReader is what agentReader asks of the agent.
type chunkReader interface {
	ReadChunks(ctx context.Context, dir string, reads []agent.ChunkRead, compress frame.Mode, fn func(i int, plaintext []byte) error) (int64, error)
}

var _ chunkReader = (*agent.Client)(nil)

// agentReader reads files through the agent's ReadChunks, which checks
// every chunk against the ID the scan claimed.
type agentReader struct {
	c        chunkReader
	dir      string
	compress frame.Mode
	wire     int64
}

func (a *agentReader) read(ctx context.Context, files []*Entry, whole bool, fn func(*Entry, []byte) error) error {
	var reads []agent.ChunkRead
	var owner []int // reads[i] is a chunk of files[owner[i]]
	var bytes int64
	var buf []byte
	var got int64 // of files[cur]
	cur := -1
	flush := func() error {
		if len(reads) == 0 {
			return nil
		}
		n, err := a.c.ReadChunks(ctx, a.dir, reads, a.compress, func(i int, data []byte) error {
			f := owner[i]
			if f != cur {
				cur, buf, got = f, buf[:0], 0
			}
			if whole {
				buf = append(buf, data...)
			}
			if got += int64(len(data)); got == files[f].Size {
				return fn(files[f], buf)
			}
			return nil
		})
		a.wire += n
		reads, owner, bytes = reads[:0], owner[:0], 0
		return err
	}
	for fi, e := range files {
		if e.Size == 0 {
			if err := fn(e, nil); err != nil {
				return err
			}
			continue
		}
		var off int64
		for _, c := range e.chunks {
			reads = append(reads, agent.ChunkRead{Path: e.Path, Offset: off, Size: c.Size, ID: c.ID})
			owner = append(owner, fi)
			off += c.Size
			if bytes += c.Size; len(reads) == maxReads || bytes >= maxReadBytes {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

// localReader reads files from the downloaded copy the listing hashed.
type localReader struct{ root string }

func (l localReader) read(ctx context.Context, files []*Entry, _ bool, fn func(*Entry, []byte) error) error {
	root, err := os.OpenRoot(l.root)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, e := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := root.ReadFile(e.Path)
		if err != nil {
			return err
		}
		if DigestOf(data) != e.Digest {
			return &archive.EntryError{Op: "manifest", Entry: e.Path, Err: archive.ErrDigest}
		}
		if err := fn(e, data); err != nil {
			return err
		}
	}
	return nil
}
