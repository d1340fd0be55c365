package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Binary is one build of the agent the host can install.
type Binary struct {
	// Arch is the GOARCH it was built for; the OS is always linux.
	Arch string
	// Digest is the SHA-256 of the binary itself (not of Zstd): the name
	// of its cached copy in a sandbox, and what its hello must say.
	Digest [sha256.Size]byte
	// Zstd is the binary, compressed with zstd; nil when Load gives it.
	Zstd []byte
	// Load, when Zstd is nil, reads it: only an install needs the
	// megabytes, and most transfers find the agent installed.
	Load func() ([]byte, error)
}

// zstd returns the compressed binary.
func (b Binary) zstd() ([]byte, error) {
	if b.Zstd != nil || b.Load == nil {
		return b.Zstd, nil
	}
	return b.Load()
}

// key names the cached copy: enough of the digest that two builds never
// share a name by accident.
func (b Binary) key() string { return hex.EncodeToString(b.Digest[:12]) }

// CacheName is the file name the build is cached under in the sandbox's
// agent directory (${TMPDIR:-/tmp}/.ferry-<uid>), which the serve script
// runs when it is there.
func (b Binary) CacheName() string { return "agent-" + b.key() }

// Bundle is the agent builds a host carries, by GOARCH.
type Bundle map[string]Binary

// archOf maps `uname -m` to GOARCH; "" for a machine no build exists for.
func archOf(machine string) string {
	switch strings.TrimSpace(machine) {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64", "armv8l", "aarch64_be":
		if machine == "aarch64_be" {
			return ""
		}
		return "arm64"
	}
	return ""
}

// ParseDigest parses a hex SHA-256.
func ParseDigest(s string) ([sha256.Size]byte, error) {
	var d [sha256.Size]byte
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != len(d) {
		return d, fmt.Errorf("parse digest %q: want %d hex digits", s, 2*len(d))
	}
	copy(d[:], b)
	return d, nil
}
