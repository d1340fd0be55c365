// Package bundle carries the agent binaries inside the ferry binary. `make
// build` puts them in blobs/ before building ferry; a ferry built without
// them (a plain `go build`) has an empty bundle and moves files in POSIX
// mode only. The agent itself must never import this package.
package bundle

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"github.com/ferry-dev/ferry/transfer/agent"
)

// blobs holds ferry-agent-linux-<arch>.zst and ferry-agent-linux-<arch>.sha256
// (the digest of the uncompressed binary) per architecture, and a README so
// that the directory always has something to embed.
//
//go:embed blobs
var blobs embed.FS

var (
	once     sync.Once
	embedded agent.Bundle
	loadErr  error
)

// Embedded returns the agent builds this ferry carries; empty when it was
// built without them.
func Embedded() (agent.Bundle, error) {
	once.Do(func() { embedded, loadErr = load(blobs) })
	return embedded, loadErr
}

func load(fsys fs.FS) (agent.Bundle, error) {
	b := agent.Bundle{}
	names, err := fs.Glob(fsys, "blobs/ferry-agent-linux-*.zst")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		arch := strings.TrimSuffix(strings.TrimPrefix(n, "blobs/ferry-agent-linux-"), ".zst")
		sum, err := fs.ReadFile(fsys, strings.TrimSuffix(n, ".zst")+".sha256")
		if err != nil {
			return nil, fmt.Errorf("read embedded agent digest for %s: %w", arch, err)
		}
		d, err := agent.ParseDigest(strings.Fields(string(sum) + " x")[0])
		if err != nil {
			return nil, fmt.Errorf("embedded agent %s: %w", arch, err)
		}
		// The build itself is read only for an install: reading an
		// embedded file copies it, megabytes at every start.
		load := func() ([]byte, error) {
			z, err := fs.ReadFile(fsys, n)
			if err != nil {
				return nil, fmt.Errorf("read embedded agent %s: %w", n, err)
			}
			return z, nil
		}
		b[arch] = agent.Binary{Arch: arch, Digest: d, Load: load}
	}
	return b, nil
}
