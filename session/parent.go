package session

import (
	"context"
	"fmt"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// Parent is the snapshot a save starts from, as its Source sees it: the
// files it holds, read in walk order (archive.CompareWalk, the order of
// fs.WalkDir and of the agent's scan) one pass at a time. They are kept
// as records in a spill, in memory up to its budget and in a private temp
// file beyond, so that the previous tree is never whole in memory: a
// Source that walks its tree in the same order looks its files up with
// [ParentFiles.Find] as it goes. A nil *Parent is a save without one, and
// has no files.
type Parent struct {
	seq   int64
	files spill
}

// Seq is the parent's sequence number, 0 for none.
func (p *Parent) Seq() int64 {
	if p == nil {
		return 0
	}
	return p.seq
}

// loadParent reads snapshot seq of key, validated as Load validates it,
// for a save to start from. The caller closes it.
func (s *Store) loadParent(ctx context.Context, key string, seq int64) (*Parent, error) {
	r, err := s.openManifest(ctx, key, seq)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	p := &Parent{seq: seq, files: spill{cmp: archive.CompareWalk[[]byte]}}
	m, err := readManifest(r, func(e *Entry) error {
		if e.Kind != KindFile {
			return nil
		}
		return p.files.add(e)
	})
	if err == nil && (m.Key != key || m.Seq != seq) {
		err = fmt.Errorf("%w: it says it is snapshot %d of %s", ErrManifest, m.Seq, m.Key)
	}
	if err == nil {
		err = p.files.seal()
	}
	if err != nil {
		p.close()
		return nil, fmt.Errorf("load snapshot %d of %s: %w", seq, key, err)
	}
	return p, nil
}

// close releases p's files; readers must be done.
func (p *Parent) close() {
	if p != nil {
		p.files.close()
	}
}

// eachChunk calls fn with the chunks of p's files, in walk order, a chunk
// that several reference once for each.
func (p *Parent) eachChunk(fn func(ID)) error {
	f := p.Files()
	for {
		e, ok, err := f.Next()
		if err != nil || !ok {
			return err
		}
		for _, c := range e.Chunks {
			fn(c.ID)
		}
	}
}

// Files returns a reader of p's files in walk order. Readers may run at
// once, each at its own place.
func (p *Parent) Files() *ParentFiles {
	if p == nil {
		return &ParentFiles{done: true}
	}
	return &ParentFiles{it: p.files.iter()}
}

// ParentFiles reads a Parent's files in walk order.
type ParentFiles struct {
	it   *spillIter
	cur  Entry // the next file, when have
	have bool
	done bool
	err  error
}

// Next returns the next file, or false at the end.
func (f *ParentFiles) Next() (Entry, bool, error) {
	if !f.peek() {
		return Entry{}, false, f.err
	}
	f.have = false
	return f.cur, true, nil
}

// Find returns the parent's file at path, if it has one, and moves past
// it and every file before it. Paths must be asked in ascending walk
// order: one asked after a later one is not found.
func (f *ParentFiles) Find(path string) (Entry, bool, error) {
	for f.peek() {
		switch c := archive.CompareWalk(f.cur.Path, path); {
		case c < 0:
			f.have = false
		case c == 0:
			f.have = false
			return f.cur, true, nil
		default:
			return Entry{}, false, nil
		}
	}
	return Entry{}, false, f.err
}

// peek reads the next file into f.cur, unless it is there, and reports
// whether there is one.
func (f *ParentFiles) peek() bool {
	if f.have {
		return true
	}
	if f.done {
		return false
	}
	rec, err := f.it.next()
	if err == nil && rec != nil {
		err = decodeRecord(rec, &f.cur)
	}
	if err != nil || rec == nil {
		f.done, f.err = true, err
		return false
	}
	f.have = true
	return true
}
