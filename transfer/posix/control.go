package posix

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"
)

// Bounds on what is kept of a script's stderr.
const (
	stderrHead = 4 << 10
	stderrTail = 4 << 10
	// maxLine bounds one line held while looking for a control line.
	maxLine = 16 << 10
	// maxKeys bounds the control messages kept by key (the scripts use
	// five): a sandbox that learns the tag (it is an argument of the
	// script its tar runs under) must not grow the map without end. A
	// line with a new key past it is kept as text.
	maxKeys = 16
)

// newTag returns a fresh random tag: control lines start with it, and a
// banner cannot guess it.
func newTag() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux.
	return "ferry-" + hex.EncodeToString(b[:])
}

// control is a script's stderr as the host sees it: lines that start with
// the call's tag are control messages ("TAG key rest"), kept by key; the
// rest is kept bounded (head and tail) for error messages. It is written
// from one goroutine and read after Exec has returned.
type control struct {
	prefix []byte
	msgs   map[string]string
	line   []byte
	long   bool // the current line outgrew maxLine and is not a control line
	head   []byte
	tail   []byte
	total  int64 // bytes of non-control text
	wire   atomic.Int64
}

func newControl(tag string) *control {
	return &control{prefix: []byte(tag + " "), msgs: map[string]string{}}
}

func (c *control) Write(p []byte) (int, error) {
	c.wire.Add(int64(len(p)))
	for rest := p; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		chunk := rest
		if i >= 0 {
			chunk = rest[:i+1]
		}
		rest = rest[len(chunk):]
		if c.long {
			c.keep(chunk)
		} else {
			c.line = append(c.line, chunk...)
			if len(c.line) > maxLine {
				c.long = true
				c.keep(c.line)
				c.line = c.line[:0]
			}
		}
		if i >= 0 {
			if !c.long {
				c.endLine()
			}
			c.long = false
		}
	}
	return len(p), nil
}

// endLine files the line held in c.line.
func (c *control) endLine() {
	line := c.line
	c.line = c.line[:0]
	if body, ok := bytes.CutPrefix(line, c.prefix); ok {
		key, val, _ := strings.Cut(strings.TrimRight(string(body), "\r\n"), " ")
		if _, known := c.msgs[key]; known || len(c.msgs) < maxKeys {
			c.msgs[key] = val
			return
		}
	}
	c.keep(line)
}

func (c *control) keep(p []byte) {
	c.total += int64(len(p))
	if n := min(len(p), stderrHead-len(c.head)); n > 0 {
		c.head = append(c.head, p[:n]...)
		p = p[n:]
	}
	c.tail = append(c.tail, p...)
	if len(c.tail) > 2*stderrTail {
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-stderrTail:]...)
	}
}

// done files a last line that had no newline. Call it once Exec returned.
func (c *control) done() {
	if len(c.line) > 0 && !c.long {
		c.endLine()
	}
}

// msg returns the control message for key.
func (c *control) msg(key string) (string, bool) {
	v, ok := c.msgs[key]
	return v, ok
}

// stderr returns the non-control text, trimmed and bounded.
func (c *control) stderr() string {
	tail := c.tail
	if len(tail) > stderrTail {
		tail = tail[len(tail)-stderrTail:]
	}
	var s string
	if omitted := c.total - int64(len(c.head)) - int64(len(tail)); omitted > 0 {
		s = string(c.head) + fmt.Sprintf("\n[... %d bytes omitted ...]\n", omitted) + string(tail)
	} else {
		s = string(c.head) + string(tail)
	}
	return strings.TrimSpace(strings.ToValidUTF8(s, "\uFFFD"))
}

// counter counts the bytes written to it and discards them.
type counter struct{ n atomic.Int64 }

func (c *counter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}
