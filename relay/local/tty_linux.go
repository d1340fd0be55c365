package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/internal/ptyio"
)

// defaultSize is a terminal's size when the caller gives none, as sshd and
// OpenShell's gateway default it.
var defaultSize = relay.WindowSize{Cols: 80, Rows: 24}

// execTTY is Exec for a command that asked for a terminal: c runs on a
// fresh pseudo-terminal as the leader of its own session, so that the
// terminal is its controlling one and killGroup still reaches its group.
func (r *Runner) execTTY(ctx context.Context, cmd *relay.Command, c *exec.Cmd) (int, error) {
	master, slave, err := ptyio.Open()
	if err != nil {
		return 0, fmt.Errorf("open pty: %w", err)
	}
	size := cmd.Size
	if size == (relay.WindowSize{}) {
		size = defaultSize
	}
	if err := ptyio.SetSize(master, size.Cols, size.Rows); err != nil {
		closeAll(master, slave)
		return 0, fmt.Errorf("set pty size: %w", err)
	}
	c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
	c.SysProcAttr = ptyio.SysProcAttr()
	intoCgroup(c, r.cfg.Cgroup)
	stdout := orDiscard(cmd.Stdout)
	if err := c.Start(); err != nil {
		closeAll(master, slave)
		if code, ok := startFailureCode(err); ok {
			// On a terminal, the shell's complaint would be output too.
			fmt.Fprintf(stdout, "%s: %v\r\n", cmd.Argv[0], err)
			return code, nil
		}
		return 0, fmt.Errorf("start %s: %w", cmd.Argv[0], err)
	}
	if r.cfg.Started != nil {
		r.cfg.Started(c.Process.Pid)
	}
	// Only the child may hold the slave: the master reads EIO, our EOF,
	// once every holder has gone.
	slave.Close()

	// Not waited for, as Exec's pipe pump: closing master ends it.
	stdinErr := make(chan error, 1)
	in := &pipeWriter{f: master}
	go ttyPump(cmd.Stdin, in, r.cfg.ChunkSize, stdinErr)

	copyErr := make(chan error, 1)
	outputDone := make(chan struct{})
	streamDone := make(chan struct{}, 1)
	out := NewGate(stdout, copyErr)
	go func() {
		defer close(outputDone)
		copyOut(out, master, r.cfg.ChunkSize)
		streamDone <- struct{}{}
	}()

	stopResize := make(chan struct{})
	resizeDone := make(chan struct{})
	go func() {
		defer close(resizeDone)
		for {
			select {
			case ws, ok := <-cmd.Resize:
				if !ok {
					return
				}
				// A terminal that is gone has no size to set.
				_ = ptyio.SetSize(master, ws.Cols, ws.Rows)
			case <-stopResize:
				return
			}
		}
	}()
	defer func() {
		close(stopResize)
		<-resizeDone
	}()

	s := supervised{
		stdinErr: stdinErr, copyErr: copyErr, outputDone: outputDone,
		streamDone: streamDone, streams: 1,
		// The master is both sides: closing it ends the pump and the
		// copier.
		closeOut: func() { master.Close() },
	}
	if r.cfg.Abandon {
		// The master stays open, so the process gets no hangup; it is
		// closed once the copier reads the terminal's end.
		s.abandon = func() {
			in.abandoned.Store(true)
			out.Drop()
		}
	}
	return r.supervise(ctx, cmd, c, s)
}

// ttyPump types the caller's stdin at the terminal. Its EOF is no EOF to
// the process (a terminal's is ^D, which is the caller's to send), so
// nothing is closed then; a read error is reported for Exec to kill the
// process, as pump does.
func ttyPump(src io.Reader, w *pipeWriter, size int, failed chan<- error) {
	if src == nil {
		return
	}
	var err error
	if wt, ok := src.(io.WriterTo); ok {
		_, err = wt.WriteTo(w)
	} else {
		_, err = io.CopyBuffer(w, onlyReader{src}, make([]byte, size))
	}
	if err != nil && w.err == nil && !errors.Is(err, io.EOF) {
		failed <- err
	}
}

// onlyReader hides a reader's WriteTo, so that CopyBuffer uses the buffer.
type onlyReader struct{ io.Reader }
