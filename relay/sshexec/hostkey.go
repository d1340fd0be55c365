package sshexec

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"net"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

var (
	// ErrUnknownHostKey means the known_hosts file has no key for the host.
	ErrUnknownHostKey = errors.New("sshexec: unknown host key")
	// ErrHostKeyMismatch means the known_hosts file holds other keys for
	// the host: it was re-keyed, or someone is intercepting the connection.
	ErrHostKeyMismatch = errors.New("sshexec: host key mismatch")
)

// hostKeys checks a server's host key against a known_hosts file, read
// again for every connection so that an edit takes effect without a new
// Client.
type hostKeys struct {
	file string
	addr string
}

// callback returns the check for one connection and the host key
// algorithms to ask for: those of the keys known for the host, so that a
// server with several keys presents one that can be checked. Nil
// algorithms leave x/crypto's defaults.
func (h *hostKeys) callback() (ssh.HostKeyCallback, []string, error) {
	db, err := knownhosts.New(h.file)
	if errors.Is(err, fs.ErrNotExist) {
		return h.unknown, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sshexec: read known hosts: %w", err)
	}
	check := func(_ string, _ net.Addr, key ssh.PublicKey) error {
		// x/crypto passes the connection's RemoteAddr, which a custom Dial's
		// conn may not have; the host to look up is Addr in any case.
		err := db(h.addr, fixedAddr(h.addr), key)
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case errors.As(err, &ke) && len(ke.Want) == 0:
			return h.unknown("", nil, key)
		case errors.As(err, &ke):
			return fmt.Errorf("%w: %s presented %s %s, but %s:%d lists another key for it; the host was re-keyed or the connection is intercepted",
				ErrHostKeyMismatch, h.addr, key.Type(), ssh.FingerprintSHA256(key), ke.Want[0].Filename, ke.Want[0].Line)
		case errors.As(err, &re):
			return fmt.Errorf("%w: %s presented %s %s, revoked at %s:%d",
				ErrHostKeyMismatch, h.addr, key.Type(), ssh.FingerprintSHA256(key), re.Revoked.Filename, re.Revoked.Line)
		}
		return err
	}
	return check, h.algorithms(db), nil
}

func (h *hostKeys) unknown(_ string, _ net.Addr, key ssh.PublicKey) error {
	return fmt.Errorf("%w: %s presented %s %s, which %s does not list; add the host's key there, or set InsecureIgnoreHostKey to skip the check",
		ErrUnknownHostKey, h.addr, key.Type(), ssh.FingerprintSHA256(key), h.file)
}

// probeKey is a key no host has, offered to the database to learn, from the
// mismatch, which keys it knows for the host.
var probeKey, _ = ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))

func (h *hostKeys) algorithms(db ssh.HostKeyCallback) []string {
	var ke *knownhosts.KeyError
	if err := db(h.addr, fixedAddr(h.addr), probeKey); !errors.As(err, &ke) || len(ke.Want) == 0 {
		// Unknown host, or only a @cert-authority line: keep the defaults.
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	for _, k := range ke.Want {
		names := []string{k.Key.Type()}
		if names[0] == ssh.KeyAlgoRSA {
			names = []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
		}
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				algos = append(algos, n)
			}
		}
	}
	return algos
}

// fixedAddr is a net.Addr that is the configured "host:port".
type fixedAddr string

func (fixedAddr) Network() string  { return "tcp" }
func (a fixedAddr) String() string { return string(a) }
