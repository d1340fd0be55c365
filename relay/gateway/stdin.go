package gateway

import (
	"errors"
	"io"
	"sync"

	"github.com/ferry-dev/ferry/relay/internal/execcodec"
)

// stdinStream is an exec's stdin: the payloads of the client's stdin
// messages, handed from the goroutine that receives them (put, finish) to
// the one that feeds the process (Read, WriteTo), without a copy between.
//
// Each payload is a buffer of execcodec's pool, owned by one goroutine at
// a time: the receiver until put hands it over, then the reader, which
// releases it once it has been written (or copied out) in full, or once a
// write has failed; put releases it instead when the reader is gone.
// close never touches the reader's buffer: the reader may be in the middle
// of a write from it (relay.Execer does not wait for its stdin pump).
type stdinStream struct {
	msgs chan []byte   // unbuffered: one payload at a time, as the process takes it
	done chan struct{} // closed by finish, after the last put
	end  error         // what finish was given; read only once done is closed
	quit chan struct{} // closed by close: nobody reads any more
	once sync.Once

	// The reader's.
	first  []byte // the start request's stdin, not pooled
	cur    []byte
	off    int
	pooled bool  // cur is a payload to release
	err    error // sticky: io.EOF, the end, or a failed write
}

// local's pump hands the pipe to a stdin that is an io.WriterTo; every
// layer between it and a stdinStream must be one for the payloads to reach
// the pipe uncopied.
var (
	_ io.WriterTo = (*stdinStream)(nil)
	_ io.WriterTo = (*faultReader)(nil)
	_ io.WriterTo = countReader{}
)

func newStdinStream(first []byte) *stdinStream {
	return &stdinStream{msgs: make(chan []byte), done: make(chan struct{}), quit: make(chan struct{}), first: first}
}

// put hands b to the reader, waiting until it takes it. It reports false,
// having released b, once the reader is gone.
func (s *stdinStream) put(b []byte) bool {
	select {
	case s.msgs <- b:
		return true
	case <-s.quit:
		execcodec.Release(b)
		return false
	}
}

// finish ends the stream after the last put: with EOF for a nil err. It is
// called once, by the receiver.
func (s *stdinStream) finish(err error) {
	if err == nil {
		err = io.EOF
	}
	s.end = err
	close(s.done)
}

// close makes the reader's next wait, and any put, return. It may be
// called more than once, from any goroutine.
func (s *stdinStream) close() { s.once.Do(func() { close(s.quit) }) }

// next makes cur hold unread bytes, or returns false with s.err set.
func (s *stdinStream) next() bool {
	for s.err == nil && s.off == len(s.cur) {
		s.drop()
		if s.first != nil {
			s.cur, s.first = s.first, nil
			continue
		}
		select {
		case b := <-s.msgs:
			s.cur, s.pooled = b, true
		case <-s.done:
			s.err = s.end
		case <-s.quit:
			s.err = io.ErrClosedPipe
		}
	}
	return s.err == nil
}

// drop lets go of cur, releasing it if it is a payload.
func (s *stdinStream) drop() {
	if s.pooled {
		execcodec.Release(s.cur)
	}
	s.cur, s.off, s.pooled = nil, 0, false
}

func (s *stdinStream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if !s.next() {
		return 0, s.err
	}
	n := copy(p, s.cur[s.off:])
	s.off += n
	if s.off == len(s.cur) {
		s.drop()
	}
	return n, nil
}

// WriteTo writes each payload to w as it arrives, the payload itself: w
// must not keep it after Write returns (io.Writer's contract), and may
// change it (the fault hooks do).
func (s *stdinStream) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for s.next() {
		n, err := w.Write(s.cur[s.off:])
		total += int64(n)
		if err == nil && n < len(s.cur)-s.off {
			err = io.ErrShortWrite
		}
		s.drop()
		if err != nil {
			s.err = err
			return total, err
		}
	}
	if errors.Is(s.err, io.EOF) {
		return total, nil
	}
	return total, s.err
}

// writeTo copies r to w, letting r write itself when it can: the readers
// that wrap a stdinStream pass its payloads on this way, uncopied.
func writeTo(r io.Reader, w io.Writer) (int64, error) {
	if wt, ok := r.(io.WriterTo); ok {
		return wt.WriteTo(w)
	}
	return io.Copy(w, r)
}
