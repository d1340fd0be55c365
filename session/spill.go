package session

import (
	"bufio"
	"bytes"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// spillBudget is the record bytes a spill holds in memory; past it, it
// writes them out as a sorted run. A variable for the tests.
var spillBudget = 4 << 20

// spillReadBuffer is the read buffer of each run a merge reads.
const spillReadBuffer = 16 << 10

// maxRecord bounds one record read back from a run: a path, and the chunk
// list of a file of many GiB.
const maxRecord = 64 << 20

// spill holds entries as records (see record.go) and gives them back
// sorted by path under cmp: in memory up to spillBudget bytes, and past
// that in sorted runs in a temp file that a read merges (an external merge
// sort). So what a save holds for its entries, and for the snapshot it
// starts from, is bounded by the budget and one read buffer per run, not
// by the tree: 300,000 entries of a session make about 8 runs. The file is
// created 0600 in a private 0700 directory and unlinked at once, so that
// it is gone when the process is, however it ends; where an open file
// cannot be unlinked it is removed by close.
//
// A spill is filled by one goroutine at a time (its owner locks), then
// sealed, then read by any number of iterators at once.
type spill struct {
	cmp     func(a, b []byte) int // of paths; nil is byte order
	mem     []byte                // records of the run being filled
	offs    []uint32              // their starts in mem
	scratch []byte
	f       *os.File
	dir     string // f's directory and name, while close must remove them
	name    string
	end     int64 // of the runs in f
	runs    []spillRun
	n       int   // entries in all
	size    int64 // their record bytes
	sealed  bool
	err     error // sticky: a failed write
}

type spillRun struct{ off, size int64 }

func (s *spill) compare(a, b []byte) int {
	if s.cmp == nil {
		return bytes.Compare(a, b)
	}
	return s.cmp(a, b)
}

// add appends e, which Entry.validate accepts.
func (s *spill) add(e *Entry) error {
	if s.err != nil {
		return s.err
	}
	if s.sealed {
		return errors.New("session: add to a sealed spill")
	}
	off := len(s.mem)
	s.mem, s.scratch = appendRecord(s.mem, s.scratch, e)
	s.offs = append(s.offs, uint32(off))
	s.n++
	s.size += int64(len(s.mem) - off)
	if len(s.mem) >= spillBudget {
		if err := s.writeRun(); err != nil {
			s.err = fmt.Errorf("spill entries: %w", err)
			return s.err
		}
	}
	return nil
}

func (s *spill) sortMem() {
	slices.SortFunc(s.offs, func(a, b uint32) int {
		return s.compare(recordPath(recordBody(s.mem, a)), recordPath(recordBody(s.mem, b)))
	})
}

// writeRun sorts the records in memory and appends them to the file as a
// run.
func (s *spill) writeRun() error {
	if s.f == nil {
		if err := s.create(); err != nil {
			return err
		}
	}
	s.sortMem()
	w := bufio.NewWriterSize(io.NewOffsetWriter(s.f, s.end), 64<<10)
	for _, off := range s.offs {
		n, k := binary.Uvarint(s.mem[off:])
		if _, err := w.Write(s.mem[off : int(off)+k+int(n)]); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	size := int64(len(s.mem))
	s.runs = append(s.runs, spillRun{off: s.end, size: size})
	s.end += size
	s.mem, s.offs = s.mem[:0], s.offs[:0]
	return nil
}

func (s *spill) create() error {
	dir, err := os.MkdirTemp("", "ferry-entries-")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "runs-")
	if err != nil {
		os.Remove(dir)
		return err
	}
	s.f = f
	if os.Remove(f.Name()) != nil {
		s.dir, s.name = dir, f.Name()
		return nil
	}
	os.Remove(dir)
	return nil
}

// seal ends the filling: the records in memory are sorted and stay there
// as the last run.
func (s *spill) seal() error {
	if s.err != nil {
		return s.err
	}
	if !s.sealed {
		s.sortMem()
		s.sealed = true
	}
	return nil
}

// close releases the file and the memory. Iterators must be done.
func (s *spill) close() {
	if s.f != nil {
		s.f.Close()
		if s.name != "" {
			os.Remove(s.name)
			os.Remove(s.dir)
		}
		s.f, s.dir, s.name = nil, "", ""
	}
	s.mem, s.offs, s.scratch, s.runs = nil, nil, nil, nil
	s.err = errors.New("session: spill closed")
}

// iter reads the sealed spill's records in order. Records with equal
// paths come out next to each other, in no given order.
func (s *spill) iter() *spillIter {
	it := &spillIter{s: s}
	if !s.sealed {
		it.err = errors.New("session: read of an unsealed spill")
		return it
	}
	for _, r := range s.runs {
		h := &spillHead{br: bufio.NewReaderSize(io.NewSectionReader(s.f, r.off, r.size), spillReadBuffer)}
		if it.fill(h) {
			it.h = append(it.h, h)
		}
	}
	if h := (&spillHead{mem: true}); it.fill(h) {
		it.h = append(it.h, h)
	}
	heap.Init(it)
	return it
}

// spillIter merges a spill's runs. It implements heap.Interface over its
// runs' heads, least path first.
type spillIter struct {
	s    *spill
	h    []*spillHead
	last *spillHead // the head whose record next returned last
	err  error
}

// spillHead is the current record of one run.
type spillHead struct {
	mem  bool          // the run in memory
	i    int           // its next record
	br   *bufio.Reader // a run in the file
	buf  []byte
	rec  []byte // current record body
	path []byte
}

// next returns the next record body, valid until the following call, or
// nil at the end.
func (it *spillIter) next() ([]byte, error) {
	if it.err != nil {
		return nil, it.err
	}
	if it.last != nil {
		if it.fill(it.last) {
			heap.Fix(it, 0)
		} else {
			heap.Pop(it)
		}
		it.last = nil
		if it.err != nil {
			return nil, it.err
		}
	}
	if len(it.h) == 0 {
		return nil, nil
	}
	it.last = it.h[0]
	return it.last.rec, nil
}

// fill moves h to its run's next record and reports whether there is one.
func (it *spillIter) fill(h *spillHead) bool {
	if h.mem {
		if h.i >= len(it.s.offs) {
			return false
		}
		h.rec = recordBody(it.s.mem, it.s.offs[h.i])
		h.i++
	} else {
		n, err := binary.ReadUvarint(h.br)
		if err == io.EOF {
			return false
		}
		if err == nil && n > maxRecord {
			err = errRecord
		}
		if err == nil {
			if uint64(cap(h.buf)) < n {
				h.buf = make([]byte, n)
			}
			h.buf = h.buf[:n]
			_, err = io.ReadFull(h.br, h.buf)
		}
		if err != nil {
			it.err = fmt.Errorf("read spilled entries: %w", err)
			return false
		}
		h.rec = h.buf
	}
	if h.path = recordPath(h.rec); h.path == nil {
		it.err = errRecord
		return false
	}
	return true
}

func (it *spillIter) Len() int           { return len(it.h) }
func (it *spillIter) Less(i, j int) bool { return it.s.compare(it.h[i].path, it.h[j].path) < 0 }
func (it *spillIter) Swap(i, j int)      { it.h[i], it.h[j] = it.h[j], it.h[i] }
func (it *spillIter) Push(x any)         { it.h = append(it.h, x.(*spillHead)) }
func (it *spillIter) Pop() any {
	h := it.h[len(it.h)-1]
	it.h = it.h[:len(it.h)-1]
	return h
}
