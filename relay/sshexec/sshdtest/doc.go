// Package sshdtest starts a real OpenSSH sshd for tests: on 127.0.0.1, on a
// free port, with a throwaway Ed25519 host key and user key, and its own
// sshd_config, so that SSH clients are tested against the server they meet in
// production rather than against a Go fake.
//
// Limitations: sshd runs as the current user; as root it needs the privilege
// separation directory /run/sshd and the "sshd" account of the
// openssh-server package. Without sshd installed, Start skips the test,
// unless the CI environment variable is set, where a missing peer is a
// failure (the Makefile installs openssh-server).
package sshdtest
