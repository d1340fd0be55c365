package main

import (
	"bufio"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay/sshexec/sshdtest"
)

// BenchmarkExecCat is `make bench`: 1 GiB through `cat` in the sandbox,
// stdin to stdout, once with `ferry exec` through the embedded gateway over
// mTLS on loopback and once with OpenSSH's `ssh 127.0.0.1 cat`, measured in
// the same run, plus a local `cat` as the ceiling of the pipes themselves.
// Every byte that comes back is checked (CRC-32C of both streams). It
// prints MB/s, the ferry/ssh ratio and ferry's peak RSS.
//
// FERRY_BENCH_SIZE sets the bytes per run, FERRY_BENCH_ROUNDS the rounds
// (the best round counts).
func BenchmarkExecCat(b *testing.B) {
	if os.Getenv("FERRY_BENCH") == "" {
		b.Skip("set FERRY_BENCH=1 (make bench) to run the peer comparison")
	}
	size := envInt(b, "FERRY_BENCH_SIZE", 1<<30)
	rounds := envInt(b, "FERRY_BENCH_ROUNDS", 2)
	dir := b.TempDir()
	bin := filepath.Join(dir, "ferry")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("build ferry: %v\n%s", err, out)
	}

	// The embedded gateway, as a separate process, with mTLS.
	certs := filepath.Join(dir, "certs")
	mustRun(b, nil, bin, "gateway", "certs", certs)
	gw := exec.Command(bin, "gateway", "serve", "--listen", "127.0.0.1:0", "--root", filepath.Join(dir, "root"), "--tls-dir", certs)
	gwErr, err := gw.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := gw.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { gw.Process.Kill(); gw.Wait() })
	addr := listeningAddr(b, gwErr)
	cfg := filepath.Join(dir, "config")
	// With an explicit endpoint on 127.0.0.1 the OpenShell CLI looks for
	// client certificates under gateways/openshell/mtls.
	if err := os.MkdirAll(filepath.Join(cfg, "openshell", "gateways", "openshell"), 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(filepath.Join(certs, "client"), filepath.Join(cfg, "openshell", "gateways", "openshell", "mtls")); err != nil {
		b.Fatal(err)
	}
	ferryEnv := append(os.Environ(), "OPENSHELL_GATEWAY_ENDPOINT=https://"+addr, "XDG_CONFIG_HOME="+cfg)
	mustRun(b, ferryEnv, bin, "sandbox", "create", "bench")

	sshd := sshdtest.Start(b)
	host, port, _ := strings.Cut(sshd.Addr, ":")
	sshArgv := []string{"ssh", "-T", "-i", sshd.IdentityFile, "-o", "UserKnownHostsFile=" + sshd.KnownHosts,
		"-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-p", port, sshd.User + "@" + host, "cat"}

	peers := []struct {
		name string
		argv []string
		env  []string
	}{
		{"ferry exec (gateway, mTLS)", []string{bin, "exec", "bench", "--", "cat"}, ferryEnv},
		{"ssh 127.0.0.1 cat", sshArgv, nil},
		{"local cat (pipe ceiling)", []string{"cat"}, nil},
	}
	best := make([]result, len(peers))
	for i := 0; i < b.N; i++ {
		for r := 0; r < rounds; r++ {
			for p, peer := range peers {
				res := measure(b, peer.argv, peer.env, int64(size))
				if best[p].seconds == 0 || res.seconds < best[p].seconds {
					best[p] = res
				}
			}
		}
	}
	mbps := func(r result) float64 { return float64(size) / 1e6 / r.seconds }
	fmt.Printf("\nexec channel, %d MiB through cat, best of %d rounds\n", size>>20, rounds)
	fmt.Printf("%-30s %10s %12s\n", "peer", "MB/s", "peak RSS")
	for p, peer := range peers {
		fmt.Printf("%-30s %10.0f %9.1f MiB\n", peer.name, mbps(best[p]), float64(best[p].maxRSS)/1024)
	}
	ratio := mbps(best[0]) / mbps(best[1])
	fmt.Printf("ratio ferry/ssh: %.2f (goal >= 1.00); ferry peak RSS %.1f MiB (goal < 64)\n\n", ratio, float64(best[0].maxRSS)/1024)
	b.ReportMetric(mbps(best[0]), "ferry-MB/s")
	b.ReportMetric(mbps(best[1]), "ssh-MB/s")
	b.ReportMetric(ratio, "ferry/ssh")
	b.ReportMetric(float64(best[0].maxRSS)/1024, "ferry-RSS-MiB")
}

type result struct {
	seconds float64
	maxRSS  int64 // KiB
}

// measure feeds size bytes to argv's stdin, reads its stdout, and checks
// that what came back is what went in.
func measure(b *testing.B, argv, env []string, size int64) result {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// A child's rusage from a Go parent counts the parent's memory (the
	// exec replaces an address space shared through vfork), so peak RSS is
	// taken by GNU time, whose own fork gives the measured program a clean
	// count.
	rssFile := filepath.Join(b.TempDir(), "rss")
	timeBin, terr := exec.LookPath("/usr/bin/time")
	if terr == nil {
		argv = append([]string{timeBin, "-f", "%M", "-o", rssFile}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if env != nil {
		cmd.Env = env
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	// A block of odd length, so that its seams fall anywhere in a chunk.
	block := make([]byte, 1<<20+7)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(block)
	table := crc32.MakeTable(crc32.Castagnoli)

	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	sent := make(chan uint32, 1)
	go func() {
		var crc uint32
		defer func() { in.Close(); sent <- crc }()
		for left := size; left > 0; {
			n := min(left, int64(len(block)))
			if _, err := in.Write(block[:n]); err != nil {
				return
			}
			crc = crc32.Update(crc, table, block[:n])
			left -= n
		}
	}()
	var got uint32
	var n int64
	buf := make([]byte, 256<<10)
	for {
		m, err := out.Read(buf)
		got = crc32.Update(got, table, buf[:m])
		n += int64(m)
		if err != nil {
			break
		}
	}
	want := <-sent
	if err := cmd.Wait(); err != nil {
		b.Fatalf("%s: %v", argv[0], err)
	}
	elapsed := time.Since(start).Seconds()
	if n != size || got != want {
		b.Fatalf("%v: got %d bytes crc %08x, want %d bytes crc %08x", argv, n, got, size, want)
	}
	var rss int64
	if terr == nil {
		out, err := os.ReadFile(rssFile)
		if err != nil {
			b.Fatal(err)
		}
		rss, _ = strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	} else if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		// An upper bound: it includes this process's own RSS.
		rss = ru.Maxrss
	}
	return result{seconds: elapsed, maxRSS: rss}
}

func listeningAddr(b *testing.B, r io.Reader) string {
	b.Helper()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		sent := false
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); !sent && len(f) >= 3 && f[0] == "listening" && f[1] == "on" {
				found <- f[2]
				sent = true
			}
		}
	}()
	select {
	case a := <-found:
		return a
	case <-time.After(30 * time.Second):
		b.Fatal("gateway did not report its address")
		return ""
	}
}

func mustRun(b *testing.B, env []string, argv ...string) {
	b.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%v: %v\n%s", argv, err, out)
	}
}

func envInt(b *testing.B, key string, def int) int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", key, v)
	}
	return n
}
