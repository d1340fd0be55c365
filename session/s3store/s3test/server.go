package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Version is the versitygw installed when none is found.
const Version = "v1.8.0"

const pkg = "github.com/versity/versitygw/cmd/versitygw"

// Server is a running versitygw. Its fields are read-only.
type Server struct {
	Endpoint  string // http://127.0.0.1:PORT
	Region    string
	AccessKey string
	SecretKey string
	Bucket    string // created empty by Start

	client *minio.Client
}

// Start starts versitygw for the test, with generated root credentials
// and one empty bucket, and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := binary(t)
	dir := t.TempDir()
	root, meta := filepath.Join(dir, "root"), filepath.Join(dir, "meta")
	for _, d := range []string{root, meta} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s := &Server{Region: "us-east-1", AccessKey: "ferry" + token(6), SecretKey: token(20)}
	var err error
	// The port is picked free and then released, so another process can
	// take it in between; a server that fails to listen is retried.
	for try := 0; try < 3; try++ {
		if err = s.run(t, bin, root, meta, filepath.Join(dir, fmt.Sprintf("versitygw-%d.log", try))); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	s.Bucket = s.NewBucket(t)
	return s
}

// NewBucket creates an empty bucket and returns its name.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := "ferry-" + strings.ToLower(token(6))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.client.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	return name
}

// Keys lists the keys under prefix in bucket, as a test damaging a store
// finds its objects.
func (s *Server) Keys(t testing.TB, bucket, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var keys []string
	for o := range s.client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("list %s/%s: %v", bucket, prefix, o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// Remove deletes key from bucket.
func (s *Server) Remove(t testing.TB, bucket, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.client.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatalf("remove %s/%s: %v", bucket, key, err)
	}
}

// run starts versitygw on a free loopback port and waits until it answers.
func (s *Server) run(t testing.TB, bin, root, meta, logPath string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// Without --keep-alive versitygw closes the connection after every
	// response (each request pays a TCP connect), but with it v1.8.0
	// fails to parse some requests that follow on a reused connection
	// ("An error occurred when parsing the HTTP request").
	cmd := exec.Command(bin, "--port", addr, "--access", s.AccessKey, "--secret", s.SecretKey,
		"--region", s.Region, "--quiet", "posix", "--sidecar", meta, root)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	s.client, err = minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Region: s.Region})
	if err != nil {
		stop()
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = s.client.ListBuckets(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("versitygw exited: %s", bytes.TrimSpace(log))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("versitygw did not answer on %s within 30s: %v\n%s", addr, err, log)
		}
	}
	t.Cleanup(stop)
	s.Endpoint = "http://" + addr
	return nil
}

var install struct {
	sync.Mutex
	path string
}

// binary finds versitygw, installing it when missing.
func binary(t testing.TB) string {
	t.Helper()
	install.Lock()
	defer install.Unlock()
	if install.path != "" {
		return install.path
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		install.path = p
		return p
	}
	bindir := goBin()
	p := filepath.Join(bindir, "versitygw")
	if _, err := os.Stat(p); err != nil {
		cmd := exec.Command("go", "install", pkg+"@"+Version)
		cmd.Dir = os.TempDir() // outside any module
		if out, err := cmd.CombinedOutput(); err != nil {
			msg := fmt.Sprintf("versitygw missing and go install %s@%s failed: %v\n%s", pkg, Version, err, out)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("versitygw installed but not found: %v", err)
	}
	install.path = p
	return p
}

// goBin is where go install puts commands: GOBIN, else GOPATH's first
// element's bin.
func goBin() string {
	out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output()
	if err != nil {
		return filepath.Join(os.Getenv("HOME"), "go", "bin")
	}
	lines := strings.Split(string(out), "\n")
	if len(lines) > 0 && strings.TrimSpace(lines[0]) != "" {
		return strings.TrimSpace(lines[0])
	}
	gopath := ""
	if len(lines) > 1 {
		gopath = strings.TrimSpace(lines[1])
	}
	return filepath.Join(filepath.SplitList(gopath)[0], "bin")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("not a TCP address")
	}
	return addr.Port, nil
}

func token(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)[:n]
}
