package agenttest

import (
	"bytes"
	"io"
	"sync"
)

// pipeSize is what the in-memory channel holds before a Write blocks: an
// OS pipe's 64 KiB. Every real channel buffers (a relay's gRPC windows,
// an SSH channel's, a pipe's), and the agent relies on it: each side
// writes its hello, and the agent its HTTP/2 SETTINGS, before reading
// the other's, which saves a round trip but would deadlock on io.Pipe.
const pipeSize = 64 << 10

// pipe is io.Pipe with a buffer of pipeSize bytes.
type pipe struct {
	mu   sync.Mutex
	cond sync.Cond
	buf  bytes.Buffer
	rerr error // the reader closed: Writes fail with it
	werr error // the writer closed: Reads return it once buf is empty
}

func newPipe() (*pipeReader, *pipeWriter) {
	p := &pipe{}
	p.cond.L = &p.mu
	return &pipeReader{p}, &pipeWriter{p}
}

type pipeReader struct{ p *pipe }
type pipeWriter struct{ p *pipe }

func (r *pipeReader) Read(b []byte) (int, error) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.buf.Len() == 0 && p.werr == nil && p.rerr == nil {
		p.cond.Wait()
	}
	if p.rerr != nil {
		return 0, io.ErrClosedPipe
	}
	if p.buf.Len() == 0 {
		return 0, p.werr
	}
	if len(b) == 0 {
		return 0, nil
	}
	n, _ := p.buf.Read(b)
	p.cond.Broadcast()
	return n, nil
}

// CloseWithError makes Writes fail with err (io.ErrClosedPipe for nil).
func (r *pipeReader) CloseWithError(err error) error {
	if err == nil {
		err = io.ErrClosedPipe
	}
	p := r.p
	p.mu.Lock()
	if p.rerr == nil {
		p.rerr = err
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	return nil
}

func (r *pipeReader) Close() error { return r.CloseWithError(nil) }

func (w *pipeWriter) Write(b []byte) (int, error) {
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for len(b) > 0 {
		for p.buf.Len() >= pipeSize && p.rerr == nil && p.werr == nil {
			p.cond.Wait()
		}
		if p.rerr != nil {
			return n, p.rerr
		}
		if p.werr != nil {
			return n, io.ErrClosedPipe
		}
		k := min(len(b), pipeSize-p.buf.Len())
		p.buf.Write(b[:k])
		b, n = b[k:], n+k
		p.cond.Broadcast()
	}
	return n, nil
}

// CloseWithError ends the stream: Reads return what is buffered, then
// io.EOF for nil. Any other err is a cut: what was in flight is lost and
// Reads return err at once.
func (w *pipeWriter) CloseWithError(err error) error {
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.werr != nil {
		return nil
	}
	if err == nil || err == io.EOF {
		p.werr = io.EOF
	} else {
		p.werr = err
		p.buf.Reset()
	}
	p.cond.Broadcast()
	return nil
}

func (w *pipeWriter) Close() error { return w.CloseWithError(nil) }
