package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"strings"

	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/cdc"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// Bounds of one ReadChunks call of an AgentSource: the plaintext it asks
// for, the reads, and the request's paths. The entries waiting for those
// chunks are held until the call ends.
const (
	maxFetchBytes = 64 << 20
	maxFetchReads = 4096
	maxFetchPaths = 16 << 20
	// maxFetchRefs bounds the chunk references of the entries waiting
	// for a call (40 bytes each).
	maxFetchRefs = 1 << 20
)

// inlineBytes is how many bytes of chunks a save lets the agent send with
// the scan's entries (new files', appended content): a small change is
// saved in the scan's round trip, with no ReadChunks call after it. The
// rest, a first save's bulk, comes by ReadChunks, compressed and sent
// apart from the walk.
const inlineBytes = 4 << 20

// ErrAgent matches a save that failed because ferry's agent answered
// something no honest agent sends: an unsafe or duplicate path, an unknown
// kind, a chunk list that does not add up, a file reported unchanged that
// the host did not know. The error names the entry.
var ErrAgent = errors.New("session: invalid answer from the agent")

// AgentSource is a Source in a sandbox, read through ferry's agent: the
// agent walks Dir, cuts files into chunks with cdc.Default() and hashes them
// next to the data, and the host fetches the chunks it needs, each
// re-hashed on arrival. The tree and its entries are those DirSource
// gives for the same directory (same chunker, same modes, mtimes and
// symlink targets), so the two save identical manifests.
//
// The agent is not trusted, ferry's own cached binary included: its
// answers are as hostile as a crafted tar. Every entry is checked (clean
// relative path, in strictly ascending walk order, so no duplicates; known
// kind; chunks contiguous from offset 0, each of 1 to MaxChunkSize bytes
// and all but the last of at least cdc.Default()'s Min, adding up to the
// size; a file within the restore's size limit, see checkSaveLimits)
// before anything is fetched, and every fetched chunk must hash to its ID.
// A chunk ID from the agent is a claim, not a proof: knowing another key's
// chunk ID must not be enough to read it. So the host skips fetching only
// the chunks of the save's parent that the store still holds (the key's
// own, restored into this sandbox; an unchanged file takes the parent's
// chunk list) and those this save has fetched already. Every other chunk
// is fetched from the agent, whether or not the store holds it (one
// another key holds is then not written again): the reads the agent sees
// depend on its answers and the key's own parent only, never on what
// other keys stored, so a save is no oracle of chunk existence either (see
// the package doc). That costs wire bytes only for content new to the key
// that another key holds already.
//
// Any violation fails the save, which then commits nothing; the error
// matches ErrAgent, archive.ErrLimit or archive.ErrLinkEscape for an
// entry, or archive.ErrDigest for a chunk's bytes (including a zstd frame
// the store's reader would refuse).
//
// A file written to between the scan and the fetch of its chunks fails the
// save with an error matching agent.ErrChanged; a retry scans again.
//
// An AgentSource is used by one Save at a time; its counters are read
// after Save returns.
type AgentSource struct {
	Client *agent.Client
	// Dir is the directory in the sandbox; a relative path starts at the
	// workspace.
	Dir string
	// ReuseUnchanged is DirSource's: a regular file whose size and mtime
	// equal its entry in the previous snapshot is not read, and takes that
	// entry's chunk list.
	ReuseUnchanged bool
	// Compress is how chunks travel (frame.Auto: zstd where it saves at
	// least 3%).
	Compress frame.Mode
	// ListOnly makes Scan a listing, not a save: each entry, checked as
	// for a save, goes to the sink with the agent's chunk IDs, and no
	// chunk is fetched. Its sink must not commit those IDs as a
	// snapshot's: they are claims (a workspace diff's manifest, which
	// compares them and stores nothing).
	ListOnly bool

	// WireBytes counts the chunk payload that crossed the channel,
	// FetchedBytes its plaintext, FetchedChunks the chunks.
	WireBytes, FetchedBytes, FetchedChunks int64
}

var _ Source = (*AgentSource)(nil)

// Scan implements Source.
func (a *AgentSource) Scan(ctx context.Context, prev *Parent, sink Sink) error {
	if a.Client == nil {
		return errors.New("agent source: nil client")
	}
	if !a.ReuseUnchanged || a.ListOnly {
		prev = nil
	}
	var known iter.Seq2[agent.KnownFile, error]
	if prev != nil {
		known = knownFiles(prev, sink)
	}
	f := &fetcher{a: a, sink: sink, want: map[ID]bool{}}
	w := &agentWalk{files: prev.Files()}
	opts := agent.ScanOptions{Params: cdc.Default(), Compress: a.Compress}
	if !a.ListOnly {
		opts.InlineBytes = inlineBytes
	}
	err := a.Client.Scan(ctx, a.Dir, known, opts, func(se agent.ScanEntry) error {
		e, chunks, err := a.entry(se, w)
		if err != nil {
			return fmt.Errorf("scan %s: %w", a.Dir, err)
		}
		if a.ListOnly {
			return sink.Add(e)
		}
		return f.add(ctx, e, chunks)
	})
	if errors.Is(err, agent.ErrBadAnswer) {
		// An entry the client could not even convert: a kind or chunk id
		// outside the protocol, refused as entry refuses the rest.
		return fmt.Errorf("scan %s: %w: %w", a.Dir, ErrAgent, err)
	}
	if err == nil {
		err = f.flush(ctx)
	}
	return err
}

// knownFiles tells the agent prev's files, in walk order, as it walks: a
// reader of its own, beside the one entry looks the unchanged files up
// with.
//
// A file whose chunks the sink does not all take the claim of (the store
// lost one since) is left out: the agent reads it again, and the save
// stores the lost chunks anew. That asks the store nothing either.
func knownFiles(prev *Parent, sink Sink) iter.Seq2[agent.KnownFile, error] {
	return func(yield func(agent.KnownFile, error) bool) {
		files := prev.Files()
		for {
			e, ok, err := files.Next()
			if err != nil {
				yield(agent.KnownFile{}, err)
				return
			}
			if !ok {
				return
			}
			if claimsAll(sink, &e) && !yield(agent.KnownFile{Path: e.Path, Size: e.Size, MTime: e.MTime}, nil) {
				return
			}
		}
	}
}

// claimsAll reports whether sink takes the claims of every chunk of e.
func claimsAll(sink Sink, e *Entry) bool {
	for _, c := range e.Chunks {
		if !claimable(sink, c.ID) {
			return false
		}
	}
	return true
}

// agentWalk is what entry knows of the scan so far: the agent reports its
// walk in walk order, strictly ascending (so without duplicates, which
// needs no set of the paths seen), and the parent's files are read along.
type agentWalk struct {
	files *ParentFiles
	last  string
	n     int
}

// entry checks one entry from the agent and builds the manifest's Entry
// from it, as DirSource would. chunks are the reads of its chunks, which
// the sink may still lack.
func (a *AgentSource) entry(se agent.ScanEntry, w *agentWalk) (Entry, []agent.Chunk, error) {
	p := se.Path
	bad := func(format string, args ...any) (Entry, []agent.Chunk, error) {
		return Entry{}, nil, fmt.Errorf("%w: entry %q: %s", ErrAgent, p, fmt.Sprintf(format, args...))
	}
	if len(p) > maxPathLen || !fs.ValidPath(p) || p == "." || strings.ContainsRune(p, 0) {
		return bad("unsafe path")
	}
	if w.n > 0 {
		switch archive.CompareWalk(w.last, p) {
		case 0:
			return bad("duplicate")
		case 1:
			return bad("out of walk order, after %q", w.last)
		}
	}
	if w.n >= maxEntries {
		return bad("over %d entries", maxEntries)
	}
	w.last = p
	w.n++
	if se.Mode&^0o7777 != 0 {
		return bad("mode %o", se.Mode)
	}
	e := Entry{Path: p, Mode: fs.FileMode(se.Mode & 0o777), MTime: se.MTime}
	if se.Kind != archive.File && (se.Size != 0 || se.Unchanged || len(se.Chunks) != 0) {
		return bad("%v with size, chunks or unchanged", se.Kind)
	}
	if se.Kind != archive.Symlink && se.Target != "" {
		return bad("%v with a target", se.Kind)
	}
	switch se.Kind {
	case archive.Dir:
		e.Kind = KindDir
	case archive.Symlink:
		e.Kind = KindSymlink
		e.Target = se.Target
		if e.Target == "" || len(e.Target) > maxTargetLen || strings.ContainsRune(e.Target, 0) {
			return bad("bad symlink target")
		}
	case archive.File:
		e.Kind = KindFile
		e.Size = se.Size
		if se.Unchanged {
			o, ok, err := w.files.Find(p)
			if err != nil {
				return Entry{}, nil, err
			}
			if !ok || len(se.Chunks) != 0 || o.Size != e.Size || o.MTime != e.MTime {
				return bad("unchanged, but not as the host knows it")
			}
			e.Chunks = o.Chunks
			return e, nil, nil
		}
		if e.Size > archive.DefaultLimits().MaxFileSize {
			return Entry{}, nil, fmt.Errorf("%w: entry %q: file of %d bytes, a restore takes at most %d", archive.ErrLimit, p, e.Size, archive.DefaultLimits().MaxFileSize)
		}
		// cdc.Default() cuts no chunk but the last under its Min: a list of
		// smaller ones (a million one-byte references to one chunk) is a
		// manifest bomb, refused before it is held twice.
		if n := int64(len(se.Chunks)); n > maxFileChunks(e.Size) {
			return bad("%d chunks for %d bytes, at most %d", n, e.Size, maxFileChunks(e.Size))
		}
		var off int64
		if len(se.Chunks) > 0 {
			e.Chunks = make([]ChunkRef, len(se.Chunks))
		}
		last := len(se.Chunks) - 1
		for i, c := range se.Chunks {
			if c.Offset != off || c.Size < 1 || c.Size > MaxChunkSize {
				return bad("chunk %d: offset %d, size %d, want offset %d", i, c.Offset, c.Size, off)
			}
			if i < last && c.Size < int64(cdc.Default().Min) {
				return bad("chunk %d of %d: %d bytes, under the chunker's minimum %d", i, last+1, c.Size, cdc.Default().Min)
			}
			e.Chunks[i] = ChunkRef{ID: ID(c.ID), Size: c.Size}
			off += c.Size
		}
		if off != e.Size {
			return bad("size %d, chunks add up to %d", e.Size, off)
		}
		return e, se.Chunks, nil
	default:
		return bad("kind %v", se.Kind)
	}
	return e, nil, nil
}

// claimSink is what an AgentSource asks its sink instead of Has (see
// AgentSource): whether an entry may reference chunk id on the agent's
// word, with no bytes sent. A sink without the method takes no claim: the
// source fetches every chunk.
type claimSink interface {
	Sink
	claimable(id ID) bool
}

var (
	_ claimSink = (*sink)(nil)
	_ claimSink = (*refetchSink)(nil)
)

// claimable reports whether sink takes a claim of chunk id.
func claimable(sink Sink, id ID) bool {
	cs, ok := sink.(claimSink)
	return ok && cs.claimable(id)
}

// fetcher collects the chunks the batch's entries reference that the
// sink takes no claim of, and fetches them in bounded batches, each chunk
// once a batch.
type fetcher struct {
	a       *AgentSource
	sink    Sink
	buf     []byte // an inline chunk's plaintext
	reads   []agent.ChunkRead
	bytes   int64
	paths   int
	want    map[ID]bool // in reads
	waiting []Entry
	refs    int // chunk references of waiting
}

// add records e once its chunks are held: at the flush of the batch that
// fetches them, or now if the sink takes the claims of all of them.
// Whether the store holds a chunk plays no part, so the reads the agent
// sees say nothing of the store.
func (f *fetcher) add(ctx context.Context, e Entry, chunks []agent.Chunk) error {
	wait := false
	for i, c := range chunks {
		id := e.Chunks[i].ID
		f.a.WireBytes += c.InlineSize()
		if f.want[id] {
			wait = true
			continue
		}
		if claimable(f.sink, id) {
			continue
		}
		if done, err := f.inline(ctx, e.Path, c); err != nil || done {
			if err != nil {
				return err
			}
			continue
		}
		if len(f.reads) == maxFetchReads || f.bytes+c.Size > maxFetchBytes || f.paths+len(e.Path) > maxFetchPaths {
			if err := f.flush(ctx); err != nil {
				return err
			}
		}
		wait = true
		f.want[id] = true
		f.reads = append(f.reads, agent.ChunkRead{Path: e.Path, Offset: c.Offset, Size: c.Size, ID: c.ID})
		f.bytes += c.Size
		f.paths += len(e.Path)
	}
	if wait {
		f.waiting = append(f.waiting, e)
		// Entries whose chunks are all in the batch already add nothing
		// to it, but are held till its flush: bound them too.
		if f.refs += len(e.Chunks); f.refs > maxFetchRefs {
			return f.flush(ctx)
		}
		return nil
	}
	return f.sink.Add(e)
}

// flush fetches the batch's chunks, stores them and records the entries
// that waited for them.
func (f *fetcher) flush(ctx context.Context) error {
	if len(f.reads) > 0 {
		if err := f.fetch(ctx, f.reads); err != nil {
			return err
		}
	}
	for _, e := range f.waiting {
		if err := f.sink.Add(e); err != nil {
			return err
		}
	}
	clear(f.reads)
	clear(f.waiting)
	f.reads, f.bytes, f.paths, f.waiting, f.refs = f.reads[:0], 0, 0, f.waiting[:0], 0
	clear(f.want)
	return nil
}

// inline stores chunk c of the file at path if the agent sent it with its
// entry, checked against its id as a fetched one is; done says it did.
// Inline bytes of a chunk the save holds already are dropped unread.
func (f *fetcher) inline(ctx context.Context, path string, c agent.Chunk) (done bool, err error) {
	data, stored, buf, ok, err := c.Inline(f.buf)
	f.buf = buf
	if !ok {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("scan %s: %s at %d: %w", f.a.Dir, path, c.Offset, err)
	}
	if err := f.store(ctx, path, ID(c.ID), data, stored); err != nil {
		return false, err
	}
	return true, nil
}

// store puts a chunk checked against its id want in the sink.
func (f *fetcher) store(ctx context.Context, path string, want ID, data, stored []byte) error {
	if ks, ok := f.sink.(*sink); ok {
		if err := ks.putChecked(ctx, want, data, stored); err != nil {
			return err
		}
	} else if id, err := f.sink.Put(ctx, data); err != nil {
		return err
	} else if id != want {
		return fmt.Errorf("store chunk of %s: stored as %s, want %s", path, id, want)
	}
	f.a.FetchedBytes += int64(len(data))
	f.a.FetchedChunks++
	return nil
}

// fetch reads the chunks reads name from the agent and stores them.
func (f *fetcher) fetch(ctx context.Context, reads []agent.ChunkRead) error {
	wire, err := f.a.Client.ReadChunksStored(ctx, f.a.Dir, reads, f.a.Compress, func(i int, data, stored []byte) error {
		// ReadChunksStored has checked data against the id, and stored
		// against data: a chunk that travelled compressed is kept as it
		// came, not compressed a second time. data and stored are valid
		// only during this call: the sink copies what it uploads.
		return f.store(ctx, reads[i].Path, ID(reads[i].ID), data, stored)
	})
	f.a.WireBytes += wire
	if err != nil {
		return fmt.Errorf("scan %s: %w", f.a.Dir, err)
	}
	return nil
}
