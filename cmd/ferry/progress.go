package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"

	"github.com/ferry-dev/ferry/relay"
)

// progress draws one status line (bytes, rate, ETA when the total is
// known) on a terminal. It counts what crosses the exec channel, so it
// wraps the Execer rather than knowing about transfers.
type progress struct {
	w     io.Writer
	total atomic.Int64 // 0 while unknown
	n     atomic.Int64
	start time.Time
	stop  chan struct{}
	done  sync.WaitGroup
}

// newProgress returns nil unless w is a terminal: progress is for people.
// total, when not nil, is the bytes to expect, for the ETA: it is called
// only when there is a line to draw, and beside the transfer, since on a
// tree of many files it takes a walk of the tree, which the transfer
// must not wait for.
func newProgress(w io.Writer, quiet bool, total func() int64) *progress {
	f, ok := w.(*os.File)
	if quiet || !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	p := &progress{w: w, start: time.Now(), stop: make(chan struct{})}
	p.done.Add(1)
	go p.loop(total)
	return p
}

func (p *progress) loop(total func() int64) {
	defer p.done.Done()
	if total != nil {
		p.total.Store(total())
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			p.draw()
		case <-p.stop:
			p.draw()
			fmt.Fprintln(p.w)
			return
		}
	}
}

func (p *progress) draw() {
	n := p.n.Load()
	secs := time.Since(p.start).Seconds()
	rate := float64(n) / max(secs, 1e-3)
	line := fmt.Sprintf("\r%10s  %10s/s", humanBytes(n), humanBytes(int64(rate)))
	if total := p.total.Load(); total > 0 && rate > 0 {
		left := time.Duration(float64(max(total-n, 0)) / rate * float64(time.Second)).Round(time.Second)
		line += fmt.Sprintf("  %3.0f%%  ETA %s", 100*float64(min(n, total))/float64(total), left)
	}
	fmt.Fprintf(p.w, "%s\033[K", line)
}

// Close stops the line; safe on nil.
func (p *progress) Close() {
	if p == nil {
		return
	}
	close(p.stop)
	p.done.Wait()
}

// wrap counts the stdin and stdout bytes of every exec through x.
func (p *progress) wrap(x relay.Execer) relay.Execer {
	if p == nil {
		return x
	}
	return countingExecer{x: x, p: p}
}

type countingExecer struct {
	x relay.Execer
	p *progress
}

func (c countingExecer) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	cc := *cmd
	if cc.Stdin != nil {
		cc.Stdin = countReader{cc.Stdin, &c.p.n}
	}
	if cc.Stdout != nil {
		cc.Stdout = countWriter{cc.Stdout, &c.p.n}
	}
	return c.x.Exec(ctx, &cc)
}

type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// localSize is the bytes of regular files under the paths, for the ETA.
func localSize(paths []string) int64 {
	var total int64
	for _, p := range paths {
		_ = filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					total += fi.Size()
				}
			}
			return nil
		})
	}
	return total
}
