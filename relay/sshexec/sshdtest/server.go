package sshdtest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Server is one running sshd. Its fields are read-only.
type Server struct {
	// Addr is "127.0.0.1:port".
	Addr string
	// User is the current user's name, the only account sshd lets in.
	User string
	// HostKey is the server's public host key.
	HostKey ssh.PublicKey
	// KnownHosts is a known_hosts file holding HostKey for "[127.0.0.1]:port".
	KnownHosts string
	// IdentityFile is the user's private key in OpenSSH format, mode 0600.
	IdentityFile string
	// Signer signs with the same private key as IdentityFile.
	Signer ssh.Signer

	dir string
}

// startWait bounds how long Start waits for sshd to accept connections.
const startWait = 10 * time.Second

// Start runs sshd until the test ends. It skips the test when sshd is not
// installed and CI is unset, and fails it otherwise.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := findSSHD()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("sshdtest: %v (CI is set, so a missing sshd is a failure)", err)
		}
		t.Skipf("sshdtest: %v; install openssh-server to run this test", err)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatalf("sshdtest: current user: %v", err)
	}
	if os.Geteuid() == 0 {
		// sshd's privilege-separated child chroots here.
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			t.Fatalf("sshdtest: %v", err)
		}
	}

	dir := t.TempDir()
	s := &Server{User: u.Username, dir: dir}
	hostSigner := writeKey(t, filepath.Join(dir, "ssh_host_ed25519_key"))
	s.HostKey = hostSigner.PublicKey()
	s.IdentityFile = filepath.Join(dir, "id_ed25519")
	s.Signer = writeKey(t, s.IdentityFile)
	authorized := filepath.Join(dir, "authorized_keys")
	writeFile(t, authorized, ssh.MarshalAuthorizedKey(s.Signer.PublicKey()))

	// A port taken between picking and binding makes sshd exit; try again.
	var lastErr error
	for range 3 {
		port := freePort(t)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		cfg := filepath.Join(dir, "sshd_config")
		writeFile(t, cfg, []byte(config(dir, port, authorized)))
		if lastErr = s.run(t, bin, cfg); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("sshdtest: %v", lastErr)
	}

	s.KnownHosts = filepath.Join(dir, "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize(s.Addr)}, s.HostKey)
	writeFile(t, s.KnownHosts, []byte(line+"\n"))
	return s
}

func findSSHD() (string, error) {
	if p, err := exec.LookPath("sshd"); err == nil {
		// sshd re-executes itself and insists on an absolute path.
		return filepath.Abs(p)
	}
	const fallback = "/usr/sbin/sshd"
	if _, err := os.Stat(fallback); err != nil {
		return "", errors.New("sshd not found in PATH or at " + fallback)
	}
	return fallback, nil
}

// config is a minimal sshd_config: key authentication for the current user
// only, nothing read from the system's configuration. AcceptEnv is left
// unset, which accepts no variables.
func config(dir string, port int, authorized string) string {
	lines := []string{
		"ListenAddress 127.0.0.1:" + strconv.Itoa(port),
		"HostKey " + filepath.Join(dir, "ssh_host_ed25519_key"),
		"AuthorizedKeysFile " + authorized,
		"PidFile " + filepath.Join(dir, "sshd.pid"),
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"UsePAM no",
		"StrictModes no",
		"PermitRootLogin prohibit-password",
		"LogLevel ERROR",
	}
	return strings.Join(lines, "\n") + "\n"
}

// run starts sshd and waits until it accepts connections or exits.
func (s *Server) run(t testing.TB, bin, cfg string) error {
	t.Helper()
	// A file, not a pipe: the per-connection children inherit sshd's
	// stderr, and a pipe would make Wait wait for the last of them.
	logPath := filepath.Join(s.dir, "sshd.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	logs := func() string {
		b, _ := os.ReadFile(logPath)
		return string(b)
	}
	cmd := exec.Command(bin, "-D", "-e", "-f", cfg)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Its own process group, so that a signal meant for the test binary's
	// group does not reach it and Cleanup can stop it alone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	deadline := time.Now().Add(startWait)
	for {
		if isSSHD(s.Addr) {
			break
		}
		select {
		case err := <-exited:
			return fmt.Errorf("sshd exited before accepting connections: %v\n%s", err, logs())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("sshd did not accept connections on %s within %v\n%s", s.Addr, startWait, logs())
		}
	}

	t.Cleanup(func() {
		// Connections already accepted live on in their own sessions
		// (sshd calls setsid for each) until their clients close them.
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			if out := logs(); out != "" {
				t.Logf("sshd log:\n%s", out)
			}
		}
	})
	return nil
}

// isSSHD reports whether an SSH server answers at addr, rather than
// nothing or a process that took the port first.
func isSSHD(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	banner := make([]byte, 4)
	_, err = io.ReadFull(c, banner)
	return err == nil && string(banner) == "SSH-"
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("sshdtest: pick a port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// writeKey creates an Ed25519 key pair, writes the private half to path in
// OpenSSH format with mode 0600, and returns its signer.
func writeKey(t testing.TB, path string) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("sshdtest: generate key: %v", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "sshdtest")
	if err != nil {
		t.Fatalf("sshdtest: marshal key: %v", err)
	}
	writeFile(t, path, pem.EncodeToMemory(block))
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatalf("sshdtest: signer: %v", err)
	}
	return signer
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
}
