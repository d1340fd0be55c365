package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/internal/ptyio"
	"github.com/ferry-dev/ferry/relay/local"
)

// sshSession serves one "session" channel: env requests are acknowledged
// and ignored, pty-req puts the exec or shell that follows on a terminal
// (which window-change resizes), exec and shell start one process, the
// "sftp" subsystem is served in the sandbox directory, and other
// subsystems are refused. A signal request is ignored: upstream's
// sandbox delivers signals only to its canonical main session, which
// this gateway has not. It returns once the channel has closed and its
// process (or sftp server) is done, or once the channel has closed before
// the process exited: that process runs on, as upstream's sandbox lets it
// (see run).
//
// The fault hooks act on each session's stdin and output as they act on
// an exec stream's; a cut ends the whole connection through cut, as a
// dropped relay would.
func (s *Server) sshSession(ctx context.Context, cut context.CancelCauseFunc, nch ssh.NewChannel, a admitted) {
	ch, reqs, err := nch.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	var p *sshProc
	var sftpDone chan struct{}
	var tty *ptyRequest
	for req := range reqs {
		ok := false
		switch req.Type {
		case "env":
			// Upstream's supervisor accepts and ignores them: a sandbox's
			// environment is its spec's, not the client's.
			ok = true
		case "exec", "shell":
			if p != nil || sftpDone != nil {
				break
			}
			argv := []string{s.cfg.Shell[0], "-l"}
			if tty != nil {
				// Upstream's sandbox starts an interactive, not a login,
				// shell on a terminal.
				argv[1] = "-i"
			}
			if req.Type == "exec" {
				var m struct{ Command string }
				if ssh.Unmarshal(req.Payload, &m) != nil || strings.ContainsRune(m.Command, 0) {
					break
				}
				argv = append(append([]string(nil), s.cfg.Shell...), m.Command)
			}
			p, err = s.startProc(ctx, cut, ch, a, argv, tty)
			if err != nil {
				s.cfg.Logger.Warn("ssh exec failed to start", "sandbox", a.pb.GetMetadata().GetName(), "err", err)
				break
			}
			ok = true
		case "signal":
			// Ignored (see above).
		case "subsystem":
			var m struct{ Name string }
			if p != nil || sftpDone != nil || ssh.Unmarshal(req.Payload, &m) != nil || m.Name != "sftp" {
				break
			}
			sftpDone = make(chan struct{})
			go func() {
				defer close(sftpDone)
				s.serveSFTP(ch, a)
			}()
			ok = true
		case "pty-req":
			// For the exec or shell to come, as upstream's sandbox takes
			// it; ferry's own client never asks, its streams being binary.
			var m ptyRequest
			if p == nil && sftpDone == nil && ssh.Unmarshal(req.Payload, &m) == nil {
				tty, ok = &m, true
			}
		case "window-change":
			var m struct{ Cols, Rows, Width, Height uint32 }
			if p != nil && ssh.Unmarshal(req.Payload, &m) == nil {
				ok = p.resize(m.Cols, m.Rows)
			}
		}
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
	}
	// The channel is closed (by the client, or with the connection).
	if p != nil {
		p.stop()
		p.wait()
	}
	if sftpDone != nil {
		// Serve has seen the channel's EOF.
		<-sftpDone
	}
}

// serveSFTP serves the sftp subsystem on ch until the client is done, with
// relative paths under the sandbox directory, then reports exit status 0
// (1 on a protocol error) and closes the channel, as OpenSSH's
// sftp-server process would. Like exec, it runs with the gateway's own
// file access: absolute paths reach the whole filesystem.
func (s *Server) serveSFTP(ch ssh.Channel, a admitted) {
	code := uint32(0)
	srv, err := sftp.NewServer(ch, sftp.WithServerWorkingDirectory(a.sb.dir))
	if err == nil {
		err = srv.Serve()
	}
	if err != nil {
		s.cfg.Logger.Info("sftp session failed", "sandbox", a.pb.GetMetadata().GetName(), "err", err)
		code = 1
	}
	_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{code}))
	_ = ch.Close()
}

// sshProc is one process started for an SSH session, in a session (and
// process group) of its own, as OpenSSH's sshd starts one.
type sshProc struct {
	ch     ssh.Channel
	quit   chan struct{} // closed by stop
	once   sync.Once
	wg     sync.WaitGroup // the stdin pump and run
	mu     sync.Mutex
	pid    int
	counts execCounts
	master *os.File // the terminal's, when there is one
	// outs are the process's outputs to the channel; cut off when the
	// process is left running (see run).
	outs []*local.Gate
}

// resize sets the process's terminal's size, as upstream's sandbox does
// on window-change; without a terminal there is nothing to resize.
func (p *sshProc) resize(cols, rows uint32) bool {
	return p.master != nil && ptyio.SetSize(p.master, uint16(min(cols, 0xffff)), uint16(min(rows, 0xffff))) == nil
}

// ptyRequest is RFC 4254's pty-req, section 6.2.
type ptyRequest struct {
	Term          string
	Cols, Rows    uint32
	Width, Height uint32
	Modes         string
}

func (s *Server) startProc(ctx context.Context, cut context.CancelCauseFunc, ch ssh.Channel, a admitted, argv []string, tty *ptyRequest) (*sshProc, error) {
	if tty != nil {
		return s.startPTYProc(ctx, cut, ch, a, argv, tty)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("create stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeFiles(inR, inW)
		return nil, fmt.Errorf("create stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeFiles(inR, inW, outR, outW)
		return nil, fmt.Errorf("create stderr pipe: %w", err)
	}
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = a.sb.dir
	c.Env = s.environ(a.sb.dir, a.pb, "dumb")
	c.Stdin, c.Stdout, c.Stderr = inR, outW, errW
	c.SysProcAttr = sessionAttr()
	if err := s.startInSandbox(c, a.pb.GetMetadata().GetId()); err != nil {
		closeFiles(inR, inW, outR, outW, errR, errW)
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	// The child holds its own copies; ours would keep EOF from coming.
	closeFiles(inR, outW, errW)
	p := &sshProc{ch: ch, quit: make(chan struct{}), pid: c.Process.Pid}
	// The OCSF events name the process the sandbox runs (the shell and
	// its -c); the exec record keeps the command line the client sent.
	s.logLaunch(a.pb.GetMetadata().GetId(), &relay.Command{Argv: argv}, p.pid)

	fault := &cutter{left: s.cfg.CutAfter, on: s.cfg.CutAfter > 0, cancel: cut}
	stdin := countReader{r: &faultReader{r: ch, c: fault, flip: flipper{at: s.cfg.CorruptStdinAfter}}, n: &p.counts.stdin}
	p.wg.Go(func() {
		// Ends at the client's EOF, when the channel closes, or when
		// the process no longer reads (inW is closed by run).
		_, _ = io.Copy(inW, stdin)
		inW.Close()
	})
	streamDone, outputDone := p.copyOutput(
		output{outR, countWriter{w: &faultWriter{w: ch, c: fault, flip: flipper{at: s.cfg.CorruptStdoutAfter}}, n: &p.counts.stdout}},
		output{errR, countWriter{w: &faultWriter{w: ch.Stderr(), c: fault}, n: &p.counts.stderr}},
	)
	start := time.Now()
	p.wg.Go(func() {
		end := p.run(ctx, c, streamDone, outputDone, func() { closeFiles(outR, errR) })
		inW.Close()
		// The same record as an exec RPC's, for the audit log: the
		// command line is what the client sent (ferry never puts a secret
		// in it), never the bytes of stdin or the output.
		code := p.exitCode(c)
		s.logTerminate(a.pb.GetMetadata().GetId(), &relay.Command{Argv: argv}, p.pid, code, end)
		s.logExec(a.pb, &relay.Command{Argv: argv[len(argv)-1:]}, &p.counts, time.Since(start), code, end)
	})
	return p, nil
}

// run waits for the process, then reports the exit status on the channel
// and closes it, as upstream's sandbox does: once the output has ended,
// or once its waits for it are spent (local.SettleOutput), when a
// background child that holds it is left running, its output read on
// and dropped. When the session or the connection ends first, the
// process is left running too: it gets no more input (on a pipe, its
// stdin's EOF; a terminal gets no hangup), and its output is dropped.
// Nothing here kills.
//
// It returns how the process ended, as the exec log names it: "exit", or
// "cancel" when the session or connection ended first.
func (p *sshProc) run(ctx context.Context, c *exec.Cmd, streamDone, outputDone <-chan struct{}, closeOutput func()) string {
	exited := make(chan struct{})
	go func() {
		waitExited(p.pid)
		close(exited)
	}()
	reap := func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		// The status is read from c.ProcessState; Wait's error only
		// repeats it.
		_ = c.Wait()
	}
	// leave cuts the output off the channel; what reaps the process,
	// and closes its output once read to the end, outlives the session.
	leave := func() {
		p.cutOutput()
		go func() {
			<-exited
			reap()
			<-outputDone
			closeOutput()
		}()
	}
	select {
	case <-exited:
	case <-ctx.Done():
		leave()
		return "cancel"
	case <-p.quit:
		leave()
		return "cancel"
	}
	settled := local.SettleOutput(ctx, streamDone, len(p.outs))
	if ctx.Err() != nil {
		leave()
		return "cancel"
	}
	reap()
	if settled {
		closeOutput()
	} else {
		p.cutOutput()
		go func() {
			<-outputDone
			closeOutput()
		}()
	}
	// Upstream's order: EOF, exit status, close. No output follows
	// the EOF.
	_ = p.ch.CloseWrite()
	p.sendExit(c.ProcessState)
	_ = p.ch.Close()
	return "exit"
}

// exitCode is c's exit code once reaped, else -1: a process left running
// (see run) is reaped later, under p.mu.
func (p *sshProc) exitCode(c *exec.Cmd) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.ProcessState == nil {
		return -1
	}
	return c.ProcessState.ExitCode()
}

// sendExit reports the exit status as upstream's sandbox does: a process
// killed by a signal has no exit code, and reports 1 (its exit-status is
// its ExitStatus's code, or 1); no exit-signal is ever sent.
func (p *sshProc) sendExit(ps *os.ProcessState) {
	code := uint32(1)
	if ps.Exited() {
		code = uint32(ps.ExitCode())
	}
	_, _ = p.ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{code}))
}

// stop leaves the process running, unless it has exited already (see run).
func (p *sshProc) stop() { p.once.Do(func() { close(p.quit) }) }

func (p *sshProc) wait() { p.wg.Wait() }

// output is one of a process's outputs and where it goes.
type output struct {
	r *os.File
	w io.Writer
}

// copyOutput copies each output to its writer, through a local.Gate that
// run may cut off (p.cutOutput), until the output ends. streamDone has a value
// as each ends; outputDone is closed once all have. The copiers are not
// the session's: a process left running (see run) is read to its
// output's end, however long after.
func (p *sshProc) copyOutput(outs ...output) (streamDone, outputDone <-chan struct{}) {
	ended := make(chan struct{}, len(outs))
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, o := range outs {
		w := local.NewGate(o.w, nil)
		p.outs = append(p.outs, w)
		wg.Go(func() {
			// Only a read ends it: a closed file, EOF, or a terminal's EIO.
			_, _ = io.Copy(w, o.r)
			ended <- struct{}{}
		})
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	return ended, done
}

// cutOutput cuts the process's output off the channel: what comes is
// read and dropped, as upstream's sandbox reads an output nobody takes.
func (p *sshProc) cutOutput() {
	for _, w := range p.outs {
		w.Drop()
	}
}

// directTCPIP serves a "direct-tcpip" channel (ssh -L) to a port on the
// loopback interface; any other destination is refused, as the
// supervisor refuses it.
func (s *Server) directTCPIP(ctx context.Context, nch ssh.NewChannel) {
	var m struct {
		Host       string
		Port       uint32
		OriginHost string
		OriginPort uint32
	}
	if err := ssh.Unmarshal(nch.ExtraData(), &m); err != nil || m.Port > 65535 {
		_ = nch.Reject(ssh.ConnectionFailed, "malformed direct-tcpip request")
		return
	}
	d := net.Dialer{Timeout: 10 * time.Second, Control: loopbackOnly}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(m.Host, strconv.Itoa(int(m.Port))))
	if errors.Is(err, errNotLoopback) {
		_ = nch.Reject(ssh.Prohibited, "only loopback destinations may be forwarded")
		return
	}
	if err != nil {
		_ = nch.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	defer conn.Close()
	ch, reqs, err := nch.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	stop := context.AfterFunc(ctx, func() {
		conn.Close()
		ch.Close()
	})
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() {
		// reqs closes with the channel; the TCP side goes with it.
		ssh.DiscardRequests(reqs)
		conn.Close()
	})
	wg.Go(func() {
		_, _ = io.Copy(conn, ch)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	})
	_, _ = io.Copy(ch, conn)
	_ = ch.CloseWrite()
	// The client closes the channel once it has both EOFs, or earlier;
	// either ends the copy above and the requests.
	wg.Wait()
}

// faultWriter is eventWriter's fault hooks for an SSH channel.
type faultWriter struct {
	w    io.Writer
	c    *cutter
	flip flipper
}

func (f *faultWriter) Write(p []byte) (int, error) {
	m := f.c.take(len(p))
	f.flip.pass(p[:m])
	if m > 0 {
		if _, err := f.w.Write(p[:m]); err != nil {
			return 0, err
		}
	}
	if m < len(p) {
		return m, errCut
	}
	return len(p), nil
}

var errNotLoopback = errors.New("gateway: destination is not a loopback address")

// loopbackOnly refuses, at connect time (after name resolution), every
// destination outside the loopback interface.
func loopbackOnly(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return errNotLoopback
	}
	return nil
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// startPTYProc is startProc on a terminal, as upstream's sandbox runs a
// session that asked for one: stdout and stderr are both the terminal,
// so all output is channel data; TERM is the client's; the client's EOF
// leaves the terminal open (a terminal's EOF is a typed ^D).
func (s *Server) startPTYProc(ctx context.Context, cut context.CancelCauseFunc, ch ssh.Channel, a admitted, argv []string, tty *ptyRequest) (*sshProc, error) {
	master, slave, err := ptyio.Open()
	if err != nil {
		return nil, fmt.Errorf("open pty: %w", err)
	}
	cols, rows := uint16(min(tty.Cols, 0xffff)), uint16(min(tty.Rows, 0xffff))
	if err := ptyio.SetSize(master, cols, rows); err != nil {
		closeFiles(master, slave)
		return nil, fmt.Errorf("set pty size: %w", err)
	}
	term := tty.Term
	if term == "" {
		term = "xterm-256color"
	}
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = a.sb.dir
	c.Env = s.environ(a.sb.dir, a.pb, term)
	c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
	c.SysProcAttr = ptyio.SysProcAttr()
	if err := s.startInSandbox(c, a.pb.GetMetadata().GetId()); err != nil {
		closeFiles(master, slave)
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	// Only the child may hold the slave: the master reads EIO, our EOF,
	// once every holder has gone.
	slave.Close()
	p := &sshProc{ch: ch, quit: make(chan struct{}), pid: c.Process.Pid, master: master}
	s.logLaunch(a.pb.GetMetadata().GetId(), &relay.Command{Argv: argv}, p.pid)

	fault := &cutter{left: s.cfg.CutAfter, on: s.cfg.CutAfter > 0, cancel: cut}
	stdin := countReader{r: &faultReader{r: ch, c: fault, flip: flipper{at: s.cfg.CorruptStdinAfter}}, n: &p.counts.stdin}
	p.wg.Go(func() {
		// Ends at the client's EOF, when the channel closes, or once the
		// master is closed.
		_, _ = io.Copy(master, stdin)
	})
	// The master's read fails (EIO) once the terminal has no process
	// left, or once it is closed.
	streamDone, outputDone := p.copyOutput(output{master, countWriter{w: &faultWriter{w: ch, c: fault, flip: flipper{at: s.cfg.CorruptStdoutAfter}}, n: &p.counts.stdout}})
	start := time.Now()
	p.wg.Go(func() {
		end := p.run(ctx, c, streamDone, outputDone, func() { master.Close() })
		code := p.exitCode(c)
		s.logTerminate(a.pb.GetMetadata().GetId(), &relay.Command{Argv: argv}, p.pid, code, end)
		s.logExec(a.pb, &relay.Command{Argv: argv[len(argv)-1:], TTY: true}, &p.counts, time.Since(start), code, end)
	})
	return p, nil
}
