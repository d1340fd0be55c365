package sshexec

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// conn is one SSH connection and the goroutines that watch it.
type conn struct {
	client *ssh.Client
	raw    *watchedConn
	dead   chan struct{} // closed once the connection is unusable
	once   sync.Once
	err    error // why it died; set before dead is closed
}

// dial opens and authenticates a connection. The goroutines it starts are
// counted in bg and end once the connection is closed.
func dial(ctx context.Context, s *settings, hk *hostKeys, bg *sync.WaitGroup) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, s.ConnectTimeout)
	defer cancel()
	cfg := &ssh.ClientConfig{User: s.User}
	if s.InsecureIgnoreHostKey {
		cfg.HostKeyCallback = ssh.InsecureIgnoreHostKey()
	} else {
		cb, algos, err := hk.callback()
		if err != nil {
			return nil, err
		}
		cfg.HostKeyCallback, cfg.HostKeyAlgorithms = cb, algos
	}
	signers := s.signers
	if s.agentSock != "" {
		var d net.Dialer
		if ac, err := d.DialContext(ctx, "unix", s.agentSock); err == nil {
			defer ac.Close()
			if keys, err := agent.NewClient(ac).Signers(); err == nil {
				signers = append(signers[:len(signers):len(signers)], keys...)
			}
		}
	}
	if len(signers) > 0 {
		// One method for all keys: x/crypto tries each method name once.
		cfg.Auth = []ssh.AuthMethod{ssh.PublicKeys(signers...)}
	}

	var nc net.Conn
	var err error
	if s.Dial != nil {
		nc, err = s.Dial(ctx)
	} else {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "tcp", s.Addr)
	}
	if err != nil {
		return nil, fmt.Errorf("sshexec: connect to %s: %w", s.Addr, err)
	}
	raw := &watchedConn{Conn: nc}
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(raw, s.Addr, cfg)
	if !stop() {
		if err == nil {
			sc.Close()
		}
		return nil, fmt.Errorf("sshexec: connect to %s: %w", s.Addr, context.Cause(ctx))
	}
	if err != nil {
		raw.Close()
		if len(signers) == 0 {
			err = fmt.Errorf("%w (no IdentityFile, no Signers, no ssh-agent)", err)
		}
		return nil, fmt.Errorf("sshexec: connect to %s as %s: %w", s.Addr, s.User, err)
	}
	cn := &conn{client: ssh.NewClient(sc, chans, reqs), raw: raw, dead: make(chan struct{})}
	bg.Add(1)
	go func() {
		defer bg.Done()
		err := cn.client.Wait()
		if err == nil {
			err = net.ErrClosed
		}
		cn.fail(err)
	}()
	if s.KeepAlive > 0 {
		bg.Add(1)
		go func() {
			defer bg.Done()
			cn.keepAlive(s.KeepAlive)
		}()
	}
	return cn, nil
}

// fail marks the connection dead and closes it, which ends every session
// on it.
func (cn *conn) fail(err error) {
	cn.once.Do(func() {
		cn.err = err
		cn.raw.Close()
		close(cn.dead)
	})
}

func (cn *conn) alive() bool {
	select {
	case <-cn.dead:
		return false
	default:
		return !cn.raw.broken.Load()
	}
}

// keepAlive sends a keepalive@openssh.com request every interval and fails
// the connection when one is not answered within keepAliveMisses intervals.
// OpenSSH answers it with a failure reply, which is as good as a success.
func (cn *conn) keepAlive(interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-cn.dead:
			return
		case <-tick.C:
		}
		reply := make(chan error, 1)
		go func() {
			_, _, err := cn.client.SendRequest("keepalive@openssh.com", true, nil)
			reply <- err
		}()
		timer := time.NewTimer(keepAliveMisses * interval)
		select {
		case err := <-reply:
			timer.Stop()
			if err != nil {
				cn.fail(fmt.Errorf("keepalive: %w", err))
				return
			}
		case <-timer.C:
			cn.fail(fmt.Errorf("keepalive: no reply in %v", keepAliveMisses*interval))
			<-reply // the request ends with the connection
			return
		}
	}
}

// watchedConn records that the connection broke before x/crypto learns of
// it: a read error or a close is recorded before it is returned, so an Exec
// that sees its channel end can tell a torn-down connection from a channel
// the server closed.
type watchedConn struct {
	net.Conn
	broken atomic.Bool
}

func (w *watchedConn) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	if err != nil {
		w.broken.Store(true)
	}
	return n, err
}

func (w *watchedConn) Write(p []byte) (int, error) {
	n, err := w.Conn.Write(p)
	if err != nil {
		w.broken.Store(true)
	}
	return n, err
}

func (w *watchedConn) Close() error {
	w.broken.Store(true)
	return w.Conn.Close()
}

// errStuck is why a connection is given up when stopping a command on it
// does not finish in time.
var errStuck = errors.New("connection stopped answering while a command was being stopped")
