package sshexec_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/sshexec"
	"github.com/ferry-dev/ferry/relay/sshexec/sshdtest"
)

func newSigner(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestHostKey(t *testing.T) {
	srv := sshdtest.Start(t)
	dir := t.TempDir()
	other := newSigner(t)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name     string
		edit     func(*sshexec.Config)
		want     error // nil: the command runs
		wantText []string
	}{
		{name: "Known", edit: func(*sshexec.Config) {}},
		{
			name:     "EmptyKnownHosts",
			edit:     func(c *sshexec.Config) { c.KnownHostsFile = write("empty", "") },
			want:     sshexec.ErrUnknownHostKey,
			wantText: []string{srv.Addr, "InsecureIgnoreHostKey", ssh.FingerprintSHA256(srv.HostKey)},
		},
		{
			name:     "MissingKnownHosts",
			edit:     func(c *sshexec.Config) { c.KnownHostsFile = filepath.Join(dir, "absent") },
			want:     sshexec.ErrUnknownHostKey,
			wantText: []string{srv.Addr, "InsecureIgnoreHostKey"},
		},
		{
			name: "OtherKeyForHost",
			edit: func(c *sshexec.Config) {
				c.KnownHostsFile = write("other", knownhosts.Line([]string{knownhosts.Normalize(srv.Addr)}, other.PublicKey())+"\n")
			},
			want:     sshexec.ErrHostKeyMismatch,
			wantText: []string{srv.Addr, "intercepted"},
		},
		{
			name: "InsecureIgnoreHostKey",
			edit: func(c *sshexec.Config) {
				c.KnownHostsFile = write("empty2", "")
				c.InsecureIgnoreHostKey = true
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, srv, tc.edit)
			r := run(testCtx(t), c, &relay.Command{Argv: []string{"echo", "ok"}})
			if tc.want == nil {
				if r.err != nil || r.code != 0 || r.stdout != "ok\n" {
					t.Fatalf("code=%d err=%v stdout=%q", r.code, r.err, r.stdout)
				}
				return
			}
			if !errors.Is(r.err, tc.want) {
				t.Fatalf("err=%v, want %v", r.err, tc.want)
			}
			if errors.Is(r.err, relay.ErrRelayLost) {
				t.Errorf("a refused host key is not a lost relay: %v", r.err)
			}
			for _, s := range tc.wantText {
				if !strings.Contains(r.err.Error(), s) {
					t.Errorf("error %q does not mention %q", r.err, s)
				}
			}
		})
	}
}

func TestWrongUserKey(t *testing.T) {
	srv := sshdtest.Start(t)
	t.Setenv("SSH_AUTH_SOCK", "")
	wrong := newSigner(t)
	c := newClient(t, srv, func(c *sshexec.Config) {
		c.IdentityFile = ""
		c.Signers = []ssh.Signer{wrong}
	})
	r := run(testCtx(t), c, &relay.Command{Argv: []string{"echo", "ok"}})
	if r.err == nil || !strings.Contains(r.err.Error(), "unable to authenticate") {
		t.Fatalf("code=%d err=%v, want an authentication failure", r.code, r.err)
	}
	// The right key, held in memory, gets in.
	c = newClient(t, srv, func(c *sshexec.Config) {
		c.IdentityFile = ""
		c.Signers = []ssh.Signer{wrong, srv.Signer}
	})
	if r := run(testCtx(t), c, &relay.Command{Argv: []string{"echo", "ok"}}); r.err != nil || r.stdout != "ok\n" {
		t.Fatalf("with the right key second: code=%d err=%v", r.code, r.err)
	}
}

func TestNewRejects(t *testing.T) {
	dir := t.TempDir()
	// The headers alone make a key encrypted; x/crypto asks for the
	// passphrase before it looks at the bytes.
	encrypted := filepath.Join(dir, "encrypted")
	block := &pem.Block{
		Type:    "RSA PRIVATE KEY",
		Headers: map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-128-CBC,00112233445566778899AABBCCDDEEFF"},
		Bytes:   make([]byte, 64),
	}
	if err := os.WriteFile(encrypted, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  sshexec.Config
		want string
	}{
		{"NoAddr", sshexec.Config{InsecureIgnoreHostKey: true}, "no Addr"},
		{"BadAddr", sshexec.Config{Addr: "[::1", InsecureIgnoreHostKey: true}, "Addr"},
		{"OneSession", sshexec.Config{Addr: "h:22", MaxSessions: 1, InsecureIgnoreHostKey: true}, "MaxSessions"},
		{"NegativeTimeout", sshexec.Config{Addr: "h:22", ConnectTimeout: -1, InsecureIgnoreHostKey: true}, "negative"},
		{"MissingIdentity", sshexec.Config{Addr: "h:22", IdentityFile: filepath.Join(dir, "none"), InsecureIgnoreHostKey: true}, "read identity"},
		{"EncryptedIdentity", sshexec.Config{Addr: "h:22", IdentityFile: encrypted, InsecureIgnoreHostKey: true}, "ssh-agent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := sshexec.New(tc.cfg)
			if err == nil {
				c.Close()
				t.Fatal("New accepted it")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err=%v, want it to mention %q", err, tc.want)
			}
		})
	}
}
