package sshexec

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"time"

	"golang.org/x/crypto/ssh"
)

// Config says where and how to connect. New validates a copy and fills in
// its defaults.
type Config struct {
	// User is the login name. Empty is the current user's name.
	User string
	// Addr is the server as "host:port"; ":22" is added when the port is
	// missing. It names the host in known_hosts, and is dialled over TCP
	// unless Dial is set.
	Addr string
	// Dial, when set, opens the connection instead of a TCP dial to Addr,
	// for example a stream relayed by an OpenShell gateway. Its ctx ends
	// when ConnectTimeout passes or the Exec that connects is cancelled.
	Dial func(ctx context.Context) (net.Conn, error)

	// KnownHostsFile lists the host keys to trust, in OpenSSH known_hosts
	// format. Default ~/.ssh/known_hosts. A host whose key is not listed is
	// refused.
	KnownHostsFile string
	// InsecureIgnoreHostKey accepts any host key, which lets anyone on the
	// path impersonate the server. For servers whose key cannot be known in
	// advance, such as an OpenShell sandbox's (a new one each start).
	InsecureIgnoreHostKey bool

	// IdentityFile is an unencrypted private key in OpenSSH or PEM format,
	// read by New. An encrypted key belongs in ssh-agent.
	IdentityFile string
	// Signers are further keys, held in memory. The keys from IdentityFile
	// and Signers are offered first, then those of the ssh-agent at
	// SSH_AUTH_SOCK (as New found it), if any. With no key at all only the
	// "none" method is tried, which an OpenShell sandbox accepts.
	Signers []ssh.Signer

	// ConnectTimeout bounds dialling plus the SSH handshake. Default 10s.
	ConnectTimeout time.Duration
	// KeepAlive is the interval of keepalive@openssh.com requests; a
	// connection that leaves three intervals without a reply is closed and
	// the Execs on it fail with relay.ErrRelayLost. Default 10s; negative
	// turns keepalives off.
	KeepAlive time.Duration
	// MaxSessions is how many sessions the server allows on one connection
	// (OpenSSH's MaxSessions). Exec runs at most MaxSessions-1 commands at
	// once, keeping one session for stopping a cancelled command; further
	// Execs wait. Default 10; at least 2.
	MaxSessions int
}

const (
	defaultConnectTimeout = 10 * time.Second
	defaultKeepAlive      = 10 * time.Second
	defaultMaxSessions    = 10
	// keepAliveMisses is how many intervals a keepalive reply may take, as
	// OpenSSH's ServerAliveCountMax.
	keepAliveMisses = 3
)

// settings is a validated Config with its defaults applied and its files
// read.
type settings struct {
	Config
	signers   []ssh.Signer
	agentSock string
}

func (cfg Config) settings() (*settings, error) {
	if cfg.Addr == "" {
		return nil, errors.New("sshexec: no Addr")
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		withPort := net.JoinHostPort(cfg.Addr, "22")
		if _, _, err2 := net.SplitHostPort(withPort); err2 != nil {
			return nil, fmt.Errorf("sshexec: Addr %q: %w", cfg.Addr, err)
		}
		cfg.Addr = withPort
	}
	if cfg.User == "" {
		u, err := user.Current()
		if err != nil {
			return nil, fmt.Errorf("sshexec: no User and no current user: %w", err)
		}
		cfg.User = u.Username
	}
	if cfg.ConnectTimeout < 0 || cfg.MaxSessions < 0 {
		return nil, errors.New("sshexec: negative ConnectTimeout or MaxSessions")
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = defaultConnectTimeout
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = defaultKeepAlive
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = defaultMaxSessions
	}
	if cfg.MaxSessions < 2 {
		return nil, fmt.Errorf("sshexec: MaxSessions %d, at least 2", cfg.MaxSessions)
	}
	if !cfg.InsecureIgnoreHostKey && cfg.KnownHostsFile == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("sshexec: no KnownHostsFile and no home directory for the default (%w); set one, or InsecureIgnoreHostKey", err)
		}
		cfg.KnownHostsFile = filepath.Join(home, ".ssh", "known_hosts")
	}
	s := &settings{Config: cfg, agentSock: os.Getenv("SSH_AUTH_SOCK")}
	if cfg.IdentityFile != "" {
		signer, err := readIdentity(cfg.IdentityFile)
		if err != nil {
			return nil, err
		}
		s.signers = append(s.signers, signer)
	}
	s.signers = append(s.signers, cfg.Signers...)
	return s, nil
}

func readIdentity(path string) (ssh.Signer, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sshexec: read identity: %w", err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	var missing *ssh.PassphraseMissingError
	if errors.As(err, &missing) {
		return nil, fmt.Errorf("sshexec: identity %s is encrypted; add it to ssh-agent instead", path)
	}
	if err != nil {
		return nil, fmt.Errorf("sshexec: parse identity %s: %w", path, err)
	}
	return signer, nil
}
