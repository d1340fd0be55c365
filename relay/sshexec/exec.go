package sshexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"golang.org/x/crypto/ssh"
)

// Bounds on stopping a command.
const (
	// stopScriptWait bounds the stop script: its own TERM grace of two
	// seconds, plus the login shell's start and a round trip.
	stopScriptWait = 10 * time.Second
	// endWait is how long a killed command's session gets to end, first on
	// its own, then again after Exec closes it, before the connection is
	// given up.
	endWait = 5 * time.Second
)

// chunk is the size of one stdin read.
const chunk = 32 << 10

// Exec implements relay.Execer. The command runs as
// relay.ShellCommand(cmd.Workdir, cmd.Env, cmd.Argv) would, in the login
// shell sshd starts for the session, inside the wrapper described in the
// package doc.
//
// Stdin is pumped by a goroutine that Exec does not wait for: once the
// process has exited and its output has reached EOF, Exec returns even if
// the pump is blocked in a Read on cmd.Stdin; the pump ends when that Read
// returns. A Read error other than io.EOF stops the command and fails Exec,
// so that a broken input is never passed on as a complete one.
//
// On error the exit code is -1. Cancellation returns ctx.Err() once the
// command has been stopped; Command.Timeout stops it the same way and
// returns relay.ExitTimeout.
func (c *Client) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	if err := cmd.Validate(); err != nil {
		return -1, err
	}
	select {
	case c.execs <- struct{}{}:
		defer func() { <-c.execs }()
	case <-ctx.Done():
		return -1, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return -1, err
	}
	cn, sess, err := c.session(ctx)
	if err != nil {
		return -1, err
	}
	defer sess.Close()
	r := &run{c: c, cn: cn, sess: sess, id: newID(), argv0: cmd.Argv[0], ended: make(chan struct{}), failed: make(chan error, 1)}
	if err := r.start(cmd, wrap(r.id, commandLine(cmd.Workdir, cmd.Env, cmd.Argv))); err != nil {
		return -1, err
	}
	// Every way out below waits for r.ended, which ends the resizer.
	defer r.resizer.Wait()
	// Starting takes a round trip that does not watch ctx.
	if err := ctx.Err(); err != nil {
		r.stop()
		return -1, err
	}
	var timeout <-chan time.Time
	if cmd.Timeout > 0 {
		t := time.NewTimer(cmd.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-r.ended:
		return r.result()
	case <-ctx.Done():
		r.stop()
		return -1, ctx.Err()
	case <-timeout:
		r.stop()
		return relay.ExitTimeout, nil
	case err := <-r.failed:
		r.stop()
		return -1, fmt.Errorf("sshexec: %s on %s: %w", r.argv0, c.s.Addr, err)
	}
}

// run is one command on one session.
type run struct {
	c     *Client
	cn    *conn
	sess  *ssh.Session
	id    string // names the pid file
	argv0 string

	ended   chan struct{} // the session has ended and its output reached EOF
	waitErr error         // sess.Wait's result; set before ended is closed
	failed  chan error    // a stdin read or output write failed
	resizer sync.WaitGroup
}

// ttySize is a terminal's size when the caller gives none, as sshd's
// clients default it.
var ttySize = relay.WindowSize{Cols: 80, Rows: 24}

func (r *run) start(cmd *relay.Command, script string) error {
	stdin, err := r.sess.StdinPipe()
	if err != nil {
		return fmt.Errorf("sshexec: %w", err)
	}
	stdout, err := r.sess.StdoutPipe()
	if err != nil {
		return fmt.Errorf("sshexec: %w", err)
	}
	stderr, err := r.sess.StderrPipe()
	if err != nil {
		return fmt.Errorf("sshexec: %w", err)
	}
	if cmd.TTY {
		// sshd puts the session on a terminal: the wrapper's stderr,
		// fd 3, is that terminal too, so the command's errors arrive in
		// its output, as on any terminal.
		size := cmd.Size
		if size == (relay.WindowSize{}) {
			size = ttySize
		}
		if err := r.sess.RequestPty("xterm-256color", int(max(size.Rows, 1)), int(max(size.Cols, 1)), ssh.TerminalModes{}); err != nil {
			return fmt.Errorf("sshexec: terminal for %s on %s: %w: %w", r.argv0, r.c.s.Addr, relay.ErrNoTTY, err)
		}
	}
	if err := r.sess.Start(script); err != nil {
		if r.cn.alive() {
			// The server answered, and said no.
			return fmt.Errorf("sshexec: start %s on %s: %w", r.argv0, r.c.s.Addr, err)
		}
		return fmt.Errorf("sshexec: start %s on %s: %w: %w", r.argv0, r.c.s.Addr, relay.ErrRelayLost, err)
	}
	go r.pump(cmd.Stdin, stdin)
	if cmd.TTY && cmd.Resize != nil {
		r.resizer.Go(func() {
			for {
				select {
				case ws, ok := <-cmd.Resize:
					if !ok {
						return
					}
					// A session that has ended has no size to set.
					_ = r.sess.WindowChange(int(max(ws.Rows, 1)), int(max(ws.Cols, 1)))
				case <-r.ended:
					return
				}
			}
		})
	}
	var copiers sync.WaitGroup
	copiers.Add(2)
	go r.copyOut(&copiers, cmd.Stdout, stdout, "stdout")
	go r.copyOut(&copiers, cmd.Stderr, stderr, "stderr")
	go func() {
		r.waitErr = r.sess.Wait()
		copiers.Wait()
		close(r.ended)
	}()
	return nil
}

// pump copies src to the remote stdin as the remote side takes it, then
// closes the remote stdin. It is not waited for (see Exec).
func (r *run) pump(src io.Reader, dst io.WriteCloser) {
	if src == nil {
		dst.Close()
		return
	}
	buf := make([]byte, chunk)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return // the session is over
			}
		}
		if err == io.EOF {
			dst.Close()
			return
		}
		if err != nil {
			r.fail(fmt.Errorf("read stdin: %w", err))
			return
		}
	}
}

// copyOut copies one output stream to w until EOF. After a failed write it
// reads on and discards, so that the session can still end.
func (r *run) copyOut(wg *sync.WaitGroup, w io.Writer, src io.Reader, name string) {
	defer wg.Done()
	if w == nil {
		w = io.Discard
	}
	buf := make([]byte, chunk)
	for {
		n, err := src.Read(buf)
		if n > 0 && w != io.Discard {
			if _, werr := w.Write(buf[:n]); werr != nil {
				r.fail(fmt.Errorf("write %s: %w", name, werr))
				w = io.Discard
			}
		}
		if err != nil {
			return
		}
	}
}

func (r *run) fail(err error) {
	select {
	case r.failed <- err:
	default:
	}
}

// result reports how the ended session went.
func (r *run) result() (int, error) {
	select {
	case err := <-r.failed:
		return -1, fmt.Errorf("sshexec: %s on %s: %w", r.argv0, r.c.s.Addr, err)
	default:
	}
	code, ok := exitCode(r.waitErr)
	// A connection torn down after the exit status arrived also ends the
	// output streams with EOF: that output may be short.
	if ok && !r.cn.raw.broken.Load() {
		return code, nil
	}
	return -1, r.lost()
}

// lost is the error for a session that ended without a trustworthy exit
// status.
func (r *run) lost() error {
	cause := r.waitErr
	if r.cn.raw.broken.Load() {
		// The connection's own error says more, and follows shortly.
		select {
		case <-r.cn.dead:
			cause = r.cn.err
		case <-time.After(time.Second):
		}
	}
	if cause == nil {
		cause = errors.New("connection broke after the exit status")
	}
	return fmt.Errorf("sshexec: %s on %s: %w: %w", r.argv0, r.c.s.Addr, relay.ErrRelayLost, cause)
}

// stop ends the command and its process group and returns once its session
// has ended, or the connection has been given up.
func (r *run) stop() {
	if wait(r.ended, 0) {
		return // it has exited already
	}
	// Servers that honour signal requests take this one; OpenSSH does for
	// non-root users (to the whole group) and refuses it for root.
	r.sess.Signal(ssh.SIGTERM)
	tombstone := r.runStopScript()
	if !wait(r.ended, 0) {
		r.sess.Signal(ssh.SIGKILL)
	}
	if !wait(r.ended, endWait) {
		r.sess.Close()
		if !wait(r.ended, endWait) {
			r.cn.fail(errStuck)
			<-r.ended
		}
	}
	if tombstone && r.cn.alive() {
		r.script(cleanupScript(r.id), stopScriptWait)
	}
}

// runStopScript runs the stop script and reports whether it left a
// tombstone.
func (r *run) runStopScript() (tombstone bool) {
	select {
	case r.c.stops <- struct{}{}:
		defer func() { <-r.c.stops }()
	case <-r.cn.dead:
		return false
	}
	code, err := r.script(stopScript(r.id), stopScriptWait)
	return err == nil && code == stopTombstone
}

// script runs a short command of Exec's own on r's connection, with no
// input or output. A connection that cannot run it within d is given up.
func (r *run) script(script string, d time.Duration) (int, error) {
	done := make(chan error, 1)
	go func() {
		sess, err := r.cn.client.NewSession()
		if err == nil {
			err = sess.Run(script)
			sess.Close()
		}
		done <- err
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	var err error
	select {
	case err = <-done:
	case <-timer.C:
		r.cn.fail(errStuck)
		err = <-done
	}
	code, ok := exitCode(err)
	if !ok {
		return -1, err
	}
	return code, nil
}

// wait reports whether ch is closed within d.
func wait(ch <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}
