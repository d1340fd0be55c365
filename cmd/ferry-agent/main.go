// Command ferry-agent is the in-sandbox side of ferry's agent mode. ferry
// installs it over the exec channel and runs `ferry-agent serve`, which
// speaks the agent protocol on stdin and stdout; the agent runs itself as
// `ferry-agent supervise STATEDIR` to supervise a detached command. It is
// not meant to be run by hand.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ferry-dev/ferry/transfer/agent/server"
	"github.com/ferry-dev/ferry/transfer/agent/supervisor"
)

// version is set at build time (-ldflags -X main.version=...).
var version = "dev"

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "supervise" {
		// The supervisor of a detached command (agent.Spawn): the agent
		// starts it as `supervise STATEDIR`, and it outlives the agent.
		os.Exit(supervisor.Main(os.Args[2:]))
	}
	if len(os.Args) != 2 || (os.Args[1] != "serve" && os.Args[1] != "version") {
		fmt.Fprintln(os.Stderr, "usage: ferry-agent serve|version|supervise STATEDIR")
		os.Exit(2)
	}
	digest, err := selfDigest()
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferry-agent: %v\n", err)
		os.Exit(1)
	}
	if os.Args[1] == "version" {
		fmt.Printf("ferry-agent %s protocol %d sha256:%x\n", version, server.ProtocolVersion, digest)
		return
	}
	// The exec ending reaches the agent as its stdin closing, as SIGHUP
	// (a session that hangs up) or SIGTERM (a relay that stops it), or as
	// a write to a stdout nobody reads. Each ends the serving the way a
	// closed stdin does, so that a Put or Restore in flight removes its
	// staging directory before the process exits. SIGPIPE is caught only
	// so that such a write fails with EPIPE (which ends the connection):
	// uncaught, it kills a Go program writing to fd 1 on the spot; ignored,
	// it would stay ignored in the commands the agent spawns.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Non-blocking, stdin goes through Go's poller, so closing it (on
	// SIGTERM) ends a read in progress.
	stdin := os.Stdin
	if syscall.SetNonblock(0, true) == nil {
		stdin = os.NewFile(0, "stdin")
	}
	err = server.Serve(ctx, stdin, os.Stdout, server.Config{Version: version, Digest: digest, Logger: log})
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "ferry-agent: %v\n", err)
		os.Exit(1)
	}
}

// selfDigest is the SHA-256 of the running binary: the hello carries it,
// so the host knows it talks to the build it installed. Hashing 9 MB costs
// about 10 ms, at every start; so the digest is kept beside the binary
// (digestFile) with the binary's inode, size and mtime, and reused while
// they match: an agent replaced under the same name (a rename, a new
// inode) is hashed again. The cache is a speed-up, not a trust boundary:
// whoever could rewrite it could as well rewrite the binary.
func selfDigest() ([sha256.Size]byte, error) {
	var d [sha256.Size]byte
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return d, fmt.Errorf("open own binary: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return d, fmt.Errorf("stat own binary: %w", err)
	}
	stamp := fileStamp(fi)
	exe, exeErr := os.Executable()
	if exeErr == nil && stamp != "" {
		if got, ok := keptDigest(digestFile(exe), stamp); ok {
			return got, nil
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return d, fmt.Errorf("hash own binary: %w", err)
	}
	copy(d[:], h.Sum(nil))
	if exeErr == nil && stamp != "" {
		saveDigest(digestFile(exe), stamp+" "+hex.EncodeToString(d[:])+"\n")
	}
	return d, nil
}

// keptDigest reads the digest kept at name for the binary version stamp.
// Anything else there (another stamp, a malformed line, a file far too
// long to be one) is no digest.
func keptDigest(name, stamp string) (d [sha256.Size]byte, ok bool) {
	f, err := os.Open(name)
	if err != nil {
		return d, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 256))
	if err != nil {
		return d, false
	}
	got, ok := strings.CutPrefix(strings.TrimSpace(string(b)), stamp+" ")
	if !ok || len(got) != hex.EncodedLen(sha256.Size) {
		return d, false
	}
	_, err = hex.Decode(d[:], []byte(got))
	return d, err == nil
}

// digestFile is where selfDigest keeps the digest of the binary exe: a
// dot file, which the host's looks for cached agents (agent-*) skip.
func digestFile(exe string) string {
	return filepath.Join(filepath.Dir(exe), "."+filepath.Base(exe)+".digest")
}

// fileStamp identifies one version of a file: inode, size, mtime. Empty
// when the platform does not say.
func fileStamp(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d %d %d", st.Ino, fi.Size(), fi.ModTime().UnixNano())
}

// saveDigest writes content to name through a temporary file and a rename,
// so that a reader sees all of it or none; failing only costs a hash at
// the next start.
func saveDigest(name, content string) {
	tmp, err := os.CreateTemp(filepath.Dir(name), ".digest-*")
	if err != nil {
		return
	}
	_, werr := tmp.WriteString(content)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), name) != nil {
		os.Remove(tmp.Name())
	}
}
