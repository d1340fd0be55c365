package session

import (
	"encoding/binary"
	"errors"
	"io/fs"
)

// A record is an Entry in the compact form a save holds entries in while
// it collects them or reads the snapshot it starts from (see spill):
// about 40 bytes and the path per entry, and 33 to 35 bytes per chunk,
// against some 150 for an Entry with its strings and slice. Records never
// leave this process; the manifest stays JSON.
//
// Layout: the uvarint length of the rest, then the path (uvarint length,
// bytes), the kind (one byte), the mode (uvarint), the mtime (varint), and
// for a file its chunks (uvarint count, then each ID and uvarint size), for
// a symlink its target (uvarint length, bytes). A file's size is the sum
// of its chunks, which Entry.validate has checked before a record is made.

const (
	recDir byte = iota
	recFile
	recSymlink
)

var errRecord = errors.New("session: damaged record")

// appendRecord appends e's record to b, building its body in scratch, and
// returns both grown.
func appendRecord(b, scratch []byte, e *Entry) ([]byte, []byte) {
	body := binary.AppendUvarint(scratch[:0], uint64(len(e.Path)))
	body = append(body, e.Path...)
	switch e.Kind {
	case KindDir:
		body = append(body, recDir)
	case KindFile:
		body = append(body, recFile)
	default:
		body = append(body, recSymlink)
	}
	body = binary.AppendUvarint(body, uint64(e.Mode))
	body = binary.AppendVarint(body, e.MTime)
	switch e.Kind {
	case KindFile:
		body = binary.AppendUvarint(body, uint64(len(e.Chunks)))
		for _, c := range e.Chunks {
			body = append(body, c.ID[:]...)
			body = binary.AppendUvarint(body, uint64(c.Size))
		}
	case KindSymlink:
		body = binary.AppendUvarint(body, uint64(len(e.Target)))
		body = append(body, e.Target...)
	}
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...), body
}

// recordBody returns the body of the record at off in b.
func recordBody(b []byte, off uint32) []byte {
	n, k := binary.Uvarint(b[off:])
	return b[int(off)+k : int(off)+k+int(n)]
}

// recordPath returns the path of the record body rec, nil if rec is
// damaged.
func recordPath(rec []byte) []byte {
	n, k := binary.Uvarint(rec)
	if k <= 0 || n > uint64(len(rec)-k) {
		return nil
	}
	return rec[k : k+int(n)]
}

// decodeRecord fills e from the record body rec. e's chunk list is new.
func decodeRecord(rec []byte, e *Entry) error {
	p := recordPath(rec)
	if p == nil {
		return errRecord
	}
	d := recDecoder{b: rec[len(p)+uvarintLen(len(p)):]}
	*e = Entry{Path: string(p)}
	switch d.byte() {
	case recDir:
		e.Kind = KindDir
	case recFile:
		e.Kind = KindFile
	case recSymlink:
		e.Kind = KindSymlink
	default:
		return errRecord
	}
	e.Mode = fs.FileMode(d.uvarint())
	e.MTime = d.varint()
	switch e.Kind {
	case KindFile:
		n := d.uvarint()
		if n > uint64(len(d.b)/(len(ID{})+1)) {
			return errRecord
		}
		if n > 0 {
			e.Chunks = make([]ChunkRef, n)
		}
		for i := range e.Chunks {
			if len(d.b) < len(ID{}) {
				return errRecord
			}
			c := &e.Chunks[i]
			copy(c.ID[:], d.b)
			d.b = d.b[len(ID{}):]
			c.Size = int64(d.uvarint())
			e.Size += c.Size
		}
	case KindSymlink:
		n := d.uvarint()
		if n > uint64(len(d.b)) {
			return errRecord
		}
		e.Target = string(d.b[:n])
		d.b = d.b[n:]
	}
	if d.bad || len(d.b) != 0 {
		return errRecord
	}
	return nil
}

func uvarintLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(n))
}

// recDecoder reads a record body; bad is sticky.
type recDecoder struct {
	b   []byte
	bad bool
}

func (d *recDecoder) byte() byte {
	if len(d.b) == 0 {
		d.bad = true
		return 0xff
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *recDecoder) uvarint() uint64 {
	v, k := binary.Uvarint(d.b)
	return took(d, v, k)
}

func (d *recDecoder) varint() int64 {
	v, k := binary.Varint(d.b)
	return took(d, v, k)
}

// took consumes the k bytes a varint decoder read for v, or marks d bad
// and gives 0 when it read none (k <= 0).
func took[T uint64 | int64](d *recDecoder, v T, k int) T {
	if k <= 0 {
		d.bad = true
		return 0
	}
	d.b = d.b[k:]
	return v
}
