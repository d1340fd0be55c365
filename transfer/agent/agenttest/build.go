package agenttest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ferry-dev/ferry/transfer/agent"
)

// home is the environment's HOME and cache dir when the test binary
// started: tests that point HOME at a temporary directory must not send
// the build to an empty Go build cache.
var home, cacheHome = os.Getenv("HOME"), os.Getenv("XDG_CACHE_HOME")

var (
	buildOnce sync.Once
	built     agent.Bundle
	buildErr  error
	buildOut  []byte
)

// Bundle builds the agent for this machine's architecture, once per test
// process (Go's build cache makes later processes quick), and returns it as
// the bundle a host installs from.
func Bundle(t testing.TB) agent.Bundle {
	t.Helper()
	b, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Build is Bundle for code without a testing.TB, such as a TestMain.
func Build() (agent.Bundle, error) {
	buildOnce.Do(func() { built, buildOut, buildErr = build(runtime.GOARCH, nil) })
	if buildErr != nil {
		return nil, fmt.Errorf("build agent: %w\n%s", buildErr, buildOut)
	}
	return built, nil
}

// BuildVersion builds the agent with a different version string, so that
// it is a different binary (another digest): a stale agent.
func BuildVersion(t testing.TB, version string) agent.Binary {
	t.Helper()
	b, out, err := build(runtime.GOARCH, []string{"-ldflags=-X main.version=" + version})
	if err != nil {
		t.Fatalf("build agent: %v\n%s", err, out)
	}
	return b[runtime.GOARCH]
}

// Raw returns the uncompressed binary of a build.
func Raw(t testing.TB, b agent.Binary) []byte {
	t.Helper()
	d, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	raw, err := d.DecodeAll(b.Zstd, nil)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func build(arch string, flags []string) (agent.Bundle, []byte, error) {
	raw, out, err := GoBuild("./cmd/ferry-agent", arch, flags...)
	if err != nil {
		return nil, out, err
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return nil, nil, err
	}
	z := enc.EncodeAll(raw, nil)
	enc.Close()
	return agent.Bundle{arch: {Arch: arch, Digest: sha256.Sum256(raw), Zstd: bytes.Clone(z)}}, nil, nil
}

// GoBuild builds the main package pkg (a path from the module's root,
// "./cmd/ferry-agent") for linux/arch as the Makefile builds the agent,
// and returns the binary; on failure, the go command's output too.
func GoBuild(pkg, arch string, flags ...string) (bin, out []byte, err error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	dir, err := os.MkdirTemp("", "ferry-agenttest-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	name := filepath.Join(dir, "bin")
	// The tags are the Makefile's (GO_TAGS): tests run the agent ferry
	// embeds.
	args := append([]string{"build", "-trimpath", "-tags", "grpcnotrace", "-o", name}, flags...)
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "HOME="+home, "XDG_CACHE_HOME="+cacheHome)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, out, err
	}
	bin, err = os.ReadFile(name)
	return bin, nil, err
}
