package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/cmd/ferry/internal/linkemu"
	"github.com/ferry-dev/ferry/relay/sshexec/sshdtest"
	"golang.org/x/crypto/ssh/knownhosts"
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
	needBench(b)
	size := envInt(b, "FERRY_BENCH_SIZE", 1<<30)
	rounds := envInt(b, "FERRY_BENCH_ROUNDS", 2)
	s := startBench(b)

	peers := []struct {
		name string
		argv []string
		env  []string
	}{
		{"ferry exec (gateway, mTLS)", []string{s.bin, "exec", "bench", "--", "cat"}, s.ferryEnv},
		{"ssh 127.0.0.1 cat", append(s.sshArgv(), "cat"), nil},
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

// BenchmarkCp is the other half of `make bench`: `ferry cp` through the
// embedded gateway, in POSIX mode (the sandbox's sh and tar) and in agent
// mode (ferry's agent, installed in the sandbox), against OpenSSH's
// `tar -cf - | ssh 127.0.0.1 tar -xf -` (and the reverse), both
// directions, for three data sets: one 256 MiB file of random data, 10,000
// files of 2 KiB in 100 directories, and 256 MiB of agent-style JSONL
// (session logs, which compress). The goals are agent mode's wall time at
// most 1.0× OpenSSH's for the random file and the small files, at most
// 0.5× for the JSONL, and ferry's peak RSS under 64 MiB. POSIX mode runs
// alongside, for comparison.
//
// Before those, it measures the first transfer into a fresh sandbox: a
// 1 MiB upload into a newly created sandbox, in POSIX mode, and in agent
// mode with the sandboxes' agent cache removed, so that the time includes
// installing the agent. The goal is at most 0.5 s over POSIX mode. The
// cache is ${TMPDIR}/.ferry-<uid> in the sandbox; the benchmark's
// sandboxes are created with TMPDIR set to a directory of its own.
//
// Both sides run against this machine: ferry's sandbox is a directory
// under the gateway's root, ssh's remote side is a fresh directory under a
// temp dir (uploads) or that same sandbox directory (downloads, so that
// both read the same files). Every copy is checked afterwards (files,
// bytes, and a CRC-32C over every path and its contents), and so is the
// mode ferry reports in its --json. The page cache is synced before each
// timed command, so that one copy's writeback does not land in the next
// one's time. Destinations are removed at the end of each round, and the
// peers take turns going first: on some filesystems (ext4 mounted with
// discard, for one) the first burst of file creations after a bulk delete
// costs seconds of kernel time, whichever program makes them.
// TMPDIR=/dev/shm takes the disk out altogether.
//
// FERRY_BENCH_CP_BIG sets the random file's bytes, FERRY_BENCH_CP_FILES
// the number of small files, FERRY_BENCH_CP_JSONL the JSONL's bytes
// (default: FERRY_BENCH_CP_BIG's), FERRY_BENCH_CP_FIRST the first
// transfer's bytes, FERRY_BENCH_ROUNDS the rounds (the best round counts;
// default 3), FERRY_BENCH_CP_COMPRESS agent mode's --compress (default
// auto). A missed goal is marked MISS in
// the summary; it does not fail the benchmark.
func BenchmarkCp(b *testing.B) {
	needBench(b)
	bigSize := envInt(b, "FERRY_BENCH_CP_BIG", 256<<20)
	nFiles := envInt(b, "FERRY_BENCH_CP_FILES", 10000)
	jsonlSize := envInt(b, "FERRY_BENCH_CP_JSONL", bigSize)
	firstSize := envInt(b, "FERRY_BENCH_CP_FIRST", 1<<20)
	rounds := envInt(b, "FERRY_BENCH_ROUNDS", 3)
	compress := os.Getenv("FERRY_BENCH_CP_COMPRESS")
	if compress == "" {
		compress = "auto"
	}
	s := startBench(b)
	s.compress = compress

	data := b.TempDir()
	firstSet := makeSmallSet(b, filepath.Join(data, "first"), 16, max(firstSize/16, 1), 4)
	sets := []*cpSet{
		makeBigSet(b, filepath.Join(data, "big"), int64(bigSize)),
		makeSmallSet(b, filepath.Join(data, "files"), nFiles, 2<<10, 100),
		makeJSONLSet(b, filepath.Join(data, "jsonl"), int64(jsonlSize)),
	}
	goals := map[string]float64{"big": 1.0, "files": 1.0, "jsonl": 0.5}
	remote := b.TempDir() // ssh's remote side for uploads
	local := b.TempDir()  // where downloads land

	var rows []cpRow
	var first firstResult
	for i := 0; i < b.N; i++ {
		rows = rows[:0]
		// First, while no agent is cached yet.
		first = s.firstCp(b, firstSet, rounds)
		for _, set := range sets {
			// The last round's agent-mode upload stays, as the download
			// source of every peer.
			src := fmt.Sprintf("up-%s-agent-%d", set.key, rounds-1)
			up := cpRow{name: "upload " + set.label, metric: "up-" + set.key, goal: goals[set.key]}
			peers := []benchPeer{{"ssh", func(r int) (result, string) {
				dst := filepath.Join(remote, fmt.Sprintf("up-%s-%d", set.key, r))
				res := s.shPipe(b, fmt.Sprintf("tar -cf - -C %s %s | %s %s",
					shq(filepath.Dir(set.dir)), shq(filepath.Base(set.dir)),
					shJoin(s.sshArgv()), shq("mkdir -p "+shq(dst)+" && tar -xf - -C "+shq(dst))))
				set.check(b, "ssh tar up", filepath.Join(dst, filepath.Base(set.dir)))
				return res, dst
			}}}
			for _, mode := range cpModes {
				peers = append(peers, benchPeer{mode, func(r int) (result, string) {
					name := fmt.Sprintf("up-%s-%s-%d", set.key, mode, r)
					dst := filepath.Join(s.sandbox, name)
					res := s.ferryCp(b, mode, set.dir, "bench:"+name)
					set.check(b, "ferry cp --mode "+mode+" up", dst)
					if name == src {
						dst = ""
					}
					return res, dst
				}})
			}
			up.set(bestOf(b, up.name, rounds, peers))
			rows = append(rows, up)

			down := cpRow{name: "download " + set.label, metric: "down-" + set.key, goal: goals[set.key]}
			peers = []benchPeer{{"ssh", func(r int) (result, string) {
				dst := filepath.Join(local, fmt.Sprintf("ssh-%s-%d", set.key, r))
				if err := os.Mkdir(dst, 0o755); err != nil {
					b.Fatal(err)
				}
				res := s.shPipe(b, fmt.Sprintf("%s %s | tar -xf - -C %s",
					shJoin(s.sshArgv()), shq("tar -cf - -C "+shq(s.sandbox)+" "+shq(src)), shq(dst)))
				set.check(b, "ssh tar down", filepath.Join(dst, src))
				return res, dst
			}}}
			for _, mode := range cpModes {
				peers = append(peers, benchPeer{mode, func(r int) (result, string) {
					dst := filepath.Join(local, fmt.Sprintf("ferry-%s-%s-%d", set.key, mode, r))
					res := s.ferryCp(b, mode, "bench:"+src, dst)
					set.check(b, "ferry cp --mode "+mode+" down", dst)
					return res, dst
				}})
			}
			down.set(bestOf(b, down.name, rounds, peers))
			rows = append(rows, down)
			removeAll(b, filepath.Join(s.sandbox, src))
		}
	}

	fmt.Printf("\nferry cp (--mode posix, --mode agent --compress %s) vs tar | ssh 127.0.0.1 | tar, best of %d rounds\n", compress, rounds)
	fmt.Printf("%-30s %-6s %8s %8s %10s %10s %11s %12s\n", "case", "mode", "ferry s", "ssh s", "ferry/ssh", "goal", "wire/bytes", "ferry RSS")
	var maxRSS int64
	for _, r := range rows {
		for m, mode := range cpModes {
			f := r.ferry[m]
			goal := "-"
			if mode == "agent" {
				goal = fmt.Sprintf("<= %.2f", r.goal)
			}
			maxRSS = max(maxRSS, f.maxRSS)
			fmt.Printf("%-30s %-6s %8.2f %8.2f %10.2f %10s %11s %8.1f MiB\n", r.name, mode, f.seconds, r.ssh.seconds, r.ratio(m), goal, f.wireRatio(), float64(f.maxRSS)/1024)
			b.ReportMetric(r.ratio(m), r.metric+"-"+mode+"/ssh")
		}
	}
	fmt.Printf("\nfirst transfer into a fresh sandbox (%s, %s), best of %d rounds\n", firstSet.label, sizeLabel(firstSet.want.bytes), first.rounds)
	fmt.Printf("%-38s %8s\n", "mode", "ferry s")
	fmt.Printf("%-38s %8.3f\n", "posix", first.posix.seconds)
	fmt.Printf("%-38s %8.3f\n", "agent, installing it (cache emptied)", first.cold.seconds)
	fmt.Printf("%-38s %8.3f\n", "agent, already installed", first.warm.seconds)
	for _, f := range []result{first.posix, first.cold, first.warm} {
		maxRSS = max(maxRSS, f.maxRSS)
	}
	extra := first.cold.seconds - first.posix.seconds
	b.ReportMetric(extra, "first-agent-minus-posix-s")
	b.ReportMetric(float64(maxRSS)/1024, "ferry-RSS-MiB")

	fmt.Printf("\ngoals\n")
	mark := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	agent := slices.Index(cpModes, "agent")
	for _, r := range rows {
		ratio := r.ratio(agent)
		note := ""
		if f := r.ferry[agent]; f.bytes > 0 {
			note = fmt.Sprintf("  (wire/bytes %s)", f.wireRatio())
		}
		fmt.Printf("  %-4s agent %-30s ferry/ssh %5.2f, goal <= %.2f%s\n", mark(ratio <= r.goal), r.name, ratio, r.goal, note)
	}
	fmt.Printf("  %-4s first transfer, agent install included: %+.3f s over posix, goal <= +0.50 s\n", mark(extra <= 0.5), extra)
	fmt.Printf("  %-4s ferry peak RSS %.1f MiB, goal < 64 MiB\n\n", mark(maxRSS < 64<<10), float64(maxRSS)/1024)
}

// cpModes are the --mode values BenchmarkCp runs ferry in.
var cpModes = []string{"posix", "agent"}

// cpRow is one case of BenchmarkCp: ssh's best time and ferry's in each
// of cpModes.
type cpRow struct {
	name, metric string
	goal         float64 // agent mode's ferry/ssh
	ssh          result
	ferry        [2]result // by cpModes
}

// set takes bestOf's results for peers ssh, then cpModes.
func (r *cpRow) set(res []result) { r.ssh, r.ferry[0], r.ferry[1] = res[0], res[1], res[2] }

func (r *cpRow) ratio(mode int) float64 { return r.ferry[mode].seconds / r.ssh.seconds }

// wireRatio is what went over the exec channel per byte of file data, as
// ferry's --json reports it.
func (r result) wireRatio() string {
	if r.bytes == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", float64(r.wire)/float64(r.bytes))
}

type firstResult struct {
	rounds            int
	posix, cold, warm result
}

// firstCp times uploads of set into sandboxes created for the purpose
// (untimed): in POSIX mode, in agent mode with the agent cache removed
// first (so that the agent is installed), and in agent mode with the
// agent cached, best of rounds each.
func (s *benchSetup) firstCp(b testing.TB, set *cpSet, rounds int) firstResult {
	b.Helper()
	fresh := func(kind, short, mode string, cold bool) benchPeer {
		return benchPeer{kind, func(r int) (result, string) {
			name := fmt.Sprintf("first-%s-%d", short, r) // at most 19 bytes
			s.createSandbox(b, name)
			if cold {
				removeAll(b, s.agentCache)
			} else if mode == "agent" {
				if m, _ := filepath.Glob(filepath.Join(s.agentCache, "agent-*")); len(m) == 0 {
					b.Fatalf("no agent cached in %s before a warm run", s.agentCache)
				}
			}
			res := s.ferryCp(b, mode, set.dir, name+":up")
			set.check(b, "ferry cp --mode "+mode+" into a new sandbox", filepath.Join(s.root, name, "up"))
			if cold {
				if m, _ := filepath.Glob(filepath.Join(s.agentCache, "agent-*")); len(m) == 0 {
					b.Fatalf("agent mode ran, but installed no agent in %s: is TMPDIR not what the sandbox sees?", s.agentCache)
				}
			}
			mustRun(b, s.ferryEnv, s.bin, "sandbox", "delete", name)
			return res, ""
		}}
	}
	// Round r starts with peer r%3: the warm run never comes before the
	// first cold one.
	res := bestOf(b, "first transfer into a new sandbox", rounds, []benchPeer{
		fresh("posix", "p", "posix", false),
		fresh("agent-install", "ai", "agent", true),
		fresh("agent-cached", "ac", "agent", false),
	})
	return firstResult{rounds: rounds, posix: res[0], cold: res[1], warm: res[2]}
}

// benchPeer is one contender of bestOf: run returns its result and a path
// to remove at the end of the round ("" for none).
type benchPeer struct {
	name string
	run  func(r int) (result, string)
}

// bestOf runs rounds rounds of peers and returns the best of each. Round r
// starts with peer r%len(peers) and goes on in order. Each round's times
// are logged (go test prints them under the table).
func bestOf(b testing.TB, name string, rounds int, peers []benchPeer) []result {
	b.Helper()
	best := make([]result, len(peers))
	for r := 0; r < rounds; r++ {
		var trash []string
		times := make([]string, len(peers))
		for k := range peers {
			p := (r + k) % len(peers)
			res, path := peers[p].run(r)
			if best[p].seconds == 0 || res.seconds < best[p].seconds {
				best[p] = res
			}
			times[p] = fmt.Sprintf("%s %.2fs", peers[p].name, res.seconds)
			if path != "" {
				trash = append(trash, path)
			}
		}
		b.Logf("%s, round %d: %s", name, r, strings.Join(times, ", "))
		for _, p := range trash {
			removeAll(b, p)
		}
	}
	return best
}

// needBench skips unless FERRY_BENCH is set.
func needBench(b testing.TB) {
	b.Helper()
	if os.Getenv("FERRY_BENCH") == "" {
		b.Skip("set FERRY_BENCH=1 (make bench) to run the peer comparison")
	}
}

// benchSetup is what the benchmarks share: a freshly built ferry, the
// embedded gateway as a separate process serving mTLS on loopback, a
// client configured for it through XDG_CONFIG_HOME, the sandbox "bench",
// and a real sshd for the OpenSSH peer. All of it ends with the benchmark.
type benchSetup struct {
	bin      string
	ferryEnv []string
	// root is the gateway's root, where each sandbox is a directory.
	root string
	// sandbox is the sandbox's directory on this machine,
	// <root>/bench: where bench:PATH lands for a relative PATH.
	sandbox string
	// sandboxTmp is every sandbox's TMPDIR, and agentCache where agent
	// mode installs the agent in it: ${TMPDIR}/.ferry-<uid>.
	sandboxTmp, agentCache string
	// compress is agent mode's --compress for ferryCp ("" for the default).
	compress string
	sshd     *sshdtest.Server
	// sshAddr and knownHosts are where ssh connects and how it checks the
	// host key: sshd's own, or the link's in front of it.
	sshAddr, knownHosts string
	// gwLink and sshLink are the emulated link in front of the gateway and
	// of sshd (nil on loopback); link is its profile.
	gwLink, sshLink *linkemu.Link
	link            *linkemu.Profile
	// cpuProfiles is where ferry's commands write CPU profiles
	// (FERRY_CPUPROFILE), "" for none.
	cpuProfiles string
	profiles    int // profiles written so far
}

// ferryEnvFor is ferryEnv, with a CPU profile named after argv when
// cpuProfiles is set.
func (s *benchSetup) ferryEnvFor(argv []string) []string {
	if s.cpuProfiles == "" {
		return s.ferryEnv
	}
	// Numbered, then the command's words without its flags and with each
	// path cut to its last element.
	s.profiles++
	words := []string{"loopback"}
	if s.link != nil {
		words[0] = s.link.Name
	}
	for _, a := range argv[1:] {
		if !strings.HasPrefix(a, "-") {
			words = append(words, filepath.Base(a))
		}
	}
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, strings.Join(words, "-"))
	return append(slices.Clone(s.ferryEnv), "FERRY_CPUPROFILE="+filepath.Join(s.cpuProfiles, fmt.Sprintf("%03d-%.100s.pprof", s.profiles, name)))
}

func startBench(b testing.TB) *benchSetup { return startBenchLink(b, nil) }

// startBenchLink is startBench with the gateway and sshd both behind an
// emulated link of profile p (nil: none, loopback).
func startBenchLink(b testing.TB, p *linkemu.Profile) *benchSetup {
	b.Helper()
	dir := b.TempDir()
	// $FERRY is a ferry already built (make build embeds the agent);
	// otherwise it is built here, with the agent builds in the tree.
	bin := os.Getenv("FERRY")
	if bin == "" {
		blob := filepath.Join("..", "..", "transfer", "agent", "bundle", "blobs", "ferry-agent-linux-"+runtime.GOARCH+".zst")
		if _, err := os.Stat(blob); err != nil {
			b.Fatalf("no agent build in the tree to embed (%v): run make agent, or make test, which builds it", err)
		}
		bin = filepath.Join(dir, "ferry")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			b.Fatalf("build ferry: %v\n%s", err, out)
		}
	} else if abs, err := filepath.Abs(bin); err != nil {
		b.Fatal(err)
	} else {
		bin = abs
	}

	// The embedded gateway, as a separate process, with mTLS.
	certs := filepath.Join(dir, "certs")
	root := filepath.Join(dir, "root")
	mustRun(b, nil, bin, "gateway", "certs", certs)
	gw := exec.Command(bin, "gateway", "serve", "--listen", "127.0.0.1:0", "--root", root, "--tls-dir", certs)
	gwErr, err := gw.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := gw.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { gw.Process.Kill(); gw.Wait() })
	addr := listeningAddr(b, gwErr)
	var gwLink *linkemu.Link
	if p != nil {
		gwLink = startLink(b, addr, *p)
		addr = gwLink.Addr()
	}
	cfg := filepath.Join(dir, "config")
	// With an explicit endpoint on 127.0.0.1 the OpenShell CLI looks for
	// client certificates under gateways/openshell/mtls.
	if err := os.MkdirAll(filepath.Join(cfg, "openshell", "gateways", "openshell"), 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(filepath.Join(certs, "client"), filepath.Join(cfg, "openshell", "gateways", "openshell", "mtls")); err != nil {
		b.Fatal(err)
	}
	// Its caches too (sandbox ids, where the agent answered), shared by
	// the bench's commands as a user's commands share theirs.
	ferryEnv := append(os.Environ(), "OPENSHELL_GATEWAY_ENDPOINT=https://"+addr, "XDG_CONFIG_HOME="+cfg, "XDG_CACHE_HOME="+filepath.Join(dir, "cache"))
	// The sandboxes' TMPDIR, and so their agent cache, is the bench's own
	// (the gateway gives sandbox commands no TMPDIR of its own).
	sandboxTmp := filepath.Join(dir, "sandbox-tmp")
	if err := os.Mkdir(sandboxTmp, 0o700); err != nil {
		b.Fatal(err)
	}
	s := &benchSetup{bin: bin, ferryEnv: ferryEnv, root: root, sandbox: filepath.Join(root, "bench"),
		sandboxTmp: sandboxTmp, agentCache: filepath.Join(sandboxTmp, fmt.Sprintf(".ferry-%d", os.Getuid()))}
	s.gwLink, s.link = gwLink, p
	s.createSandbox(b, "bench")
	s.sshd = sshdtest.Start(b)
	s.sshAddr, s.knownHosts = s.sshd.Addr, s.sshd.KnownHosts
	if p != nil {
		s.sshLink = startLink(b, s.sshd.Addr, *p)
		s.sshAddr = s.sshLink.Addr()
		// The host key, known under the link's address.
		s.knownHosts = filepath.Join(dir, "known_hosts")
		line := knownhosts.Line([]string{knownhosts.Normalize(s.sshAddr)}, s.sshd.HostKey)
		if err := os.WriteFile(s.knownHosts, []byte(line+"\n"), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

func startLink(b testing.TB, target string, p linkemu.Profile) *linkemu.Link {
	b.Helper()
	l, err := linkemu.Start(context.Background(), linkemu.ConfigFor(target, p))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// linkStats is both links' counters together (zero on loopback): only one
// of them carries a given command's bytes.
func (s *benchSetup) linkStats() linkemu.Stats {
	var st linkemu.Stats
	for _, l := range []*linkemu.Link{s.gwLink, s.sshLink} {
		if l != nil {
			x := l.Stats()
			st.Up, st.Down, st.Conns, st.Turns = st.Up+x.Up, st.Down+x.Down, st.Conns+x.Conns, st.Turns+x.Turns
		}
	}
	return st
}

// createSandbox creates the sandbox name with TMPDIR set to sandboxTmp.
func (s *benchSetup) createSandbox(b testing.TB, name string) {
	b.Helper()
	mustRun(b, s.ferryEnv, s.bin, "sandbox", "create", "-e", "TMPDIR="+s.sandboxTmp, name)

}

// sshArgv is `ssh 127.0.0.1` to the bench's sshd, up to the remote
// command.
func (s *benchSetup) sshArgv(opts ...string) []string {
	host, port, _ := strings.Cut(s.sshAddr, ":")
	argv := append([]string{"ssh", "-T"}, opts...)
	return append(argv, "-i", s.sshd.IdentityFile, "-o", "UserKnownHostsFile="+s.knownHosts,
		"-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-p", port, s.sshd.User+"@"+host)
}

// ferryCp times `ferry cp --json --mode mode args...`, takes its peak RSS
// and what its --json reports, and checks that the copy ran in mode.
func (s *benchSetup) ferryCp(b testing.TB, mode string, args ...string) result {
	b.Helper()
	argv := []string{s.bin, "cp", "--json", "--mode", mode}
	if mode == "agent" && s.compress != "" {
		argv = append(argv, "--compress", s.compress)
	}
	link := s.linkStats()
	argv = append(argv, args...)
	res, out := timed(b, argv, s.ferryEnvFor(argv), true)
	res.link = s.linkStats().Sub(link)
	var st struct {
		Bytes     int64  `json:"bytes"`
		WireBytes int64  `json:"wire_bytes"`
		Mode      string `json:"mode"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		b.Fatalf("ferry cp --json %q: %v\n%s", args, err, out)
	}
	if st.Mode != mode {
		b.Fatalf("ferry cp --mode %s %q ran in mode %q", mode, args, st.Mode)
	}
	res.bytes, res.wire, res.mode = st.Bytes, st.WireBytes, st.Mode
	return res
}

// shPipe times `sh -c pipeline`, the whole pipeline.
func (s *benchSetup) shPipe(b testing.TB, pipeline string) result {
	b.Helper()
	link := s.linkStats()
	res, _ := timed(b, []string{"sh", "-c", pipeline}, nil, false)
	res.link = s.linkStats().Sub(link)
	return res
}

type result struct {
	seconds float64
	// cpu is the command's user and system time, its children's included
	// (a pipeline's every stage; not the remote sshd's).
	cpu    float64
	maxRSS int64 // KiB
	// For ferry cp, what its --json reports.
	bytes, wire int64
	mode        string
	// link is what crossed the emulated link (zero on loopback).
	link linkemu.Stats
}

// rssProbe wraps a command in GNU time to take its peak RSS. A child's
// rusage from a Go parent counts the parent's memory (the exec replaces an
// address space shared through vfork), so peak RSS is taken by GNU time,
// whose own fork gives the measured program a clean count.
type rssProbe struct {
	file string // "" when /usr/bin/time is missing
}

// newRSSProbe returns argv run under GNU time, when there is one.
func newRSSProbe(b testing.TB, argv []string) (rssProbe, []string) {
	b.Helper()
	timeBin, err := exec.LookPath("/usr/bin/time")
	if err != nil {
		return rssProbe{}, argv
	}
	file := filepath.Join(b.TempDir(), "rss")
	return rssProbe{file: file}, append([]string{timeBin, "-f", "%M", "-o", file}, argv...)
}

// read returns the peak RSS in KiB of the command that ran as ps.
func (p rssProbe) read(b testing.TB, ps *os.ProcessState) int64 {
	b.Helper()
	if p.file == "" {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			// An upper bound: it includes this process's own RSS.
			return ru.Maxrss
		}
		return 0
	}
	out, err := os.ReadFile(p.file)
	if err != nil {
		b.Fatal(err)
	}
	rss, _ := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	return rss
}

// timed runs argv to completion after a sync and returns its wall time,
// its peak RSS when rss is set, and its standard output. Its standard
// error is shown only if it fails.
func timed(b testing.TB, argv, env []string, rss bool) (result, []byte) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var probe rssProbe
	if rss {
		probe, argv = newRSSProbe(b, argv)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if env != nil {
		cmd.Env = env
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	syscall.Sync()
	start := time.Now()
	err := cmd.Run()
	elapsed := time.Since(start).Seconds()
	if err != nil {
		b.Fatalf("%q: %v\n%s%s", argv, err, out.Bytes(), errOut.Bytes())
	}
	res := result{seconds: elapsed, cpu: (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()}
	if os.Getenv("FERRY_TRACE_RPC") != "" {
		// The trace goes to the command's stderr; the bench passes it on
		// with the command's time (b.Logf would truncate it).
		fmt.Fprintf(os.Stderr, "%.3fs %q\n%s", elapsed, argv, errOut.Bytes())
	}
	if rss {
		res.maxRSS = probe.read(b, cmd.ProcessState)
	}
	return res, out.Bytes()
}

// measure feeds size bytes to argv's stdin, reads its stdout, and checks
// that what came back is what went in.
func measure(b testing.TB, argv, env []string, size int64) result {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	probe, argv := newRSSProbe(b, argv)
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
	return result{seconds: elapsed, maxRSS: probe.read(b, cmd.ProcessState)}
}

// cpSet is one data set for BenchmarkCp: a local directory and the
// digest every copy of it must have.
type cpSet struct {
	label string // for the table
	key   string // for metric and path names
	dir   string
	want  treeDigest
}

// treeDigest sums a tree's regular files: their number, their bytes, and
// a CRC-32C over each one's slash-separated path and contents, in lexical
// order. Anything but directories and regular files is an error.
type treeDigest struct {
	files, bytes int64
	crc          uint32
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func digestTree(b testing.TB, root string) treeDigest {
	b.Helper()
	var d treeDigest
	h := crc32.New(castagnoli)
	buf := make([]byte, 1<<20)
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			return nil
		}
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file (%v)", p, e.Type())
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		io.WriteString(h, filepath.ToSlash(rel)+"\x00")
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		n, err := io.CopyBuffer(h, f, buf)
		f.Close()
		if err != nil {
			return err
		}
		d.files++
		d.bytes += n
		return nil
	})
	if err != nil {
		b.Fatalf("digest %s: %v", root, err)
	}
	d.crc = h.Sum32()
	return d
}

// check fails the benchmark unless the tree at dir is a full copy.
func (c *cpSet) check(b testing.TB, what, dir string) {
	b.Helper()
	if got := digestTree(b, dir); got != c.want {
		b.Fatalf("%s of %s: %s holds %d files, %d bytes, crc %08x; want %d files, %d bytes, crc %08x",
			what, c.label, dir, got.files, got.bytes, got.crc, c.want.files, c.want.bytes, c.want.crc)
	}
}

// makeBigSet writes dir/blob, size bytes from a seeded ChaCha8.
func makeBigSet(b testing.TB, dir string, size int64) *cpSet {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "blob"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(f, io.LimitReader(rand.NewChaCha8([32]byte{2}), size)); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return &cpSet{label: sizeLabel(size) + " file", key: "big", dir: dir, want: digestTree(b, dir)}
}

// makeSmallSet writes n files of size random bytes, spread over subdirs
// directories of dir.
func makeSmallSet(b testing.TB, dir string, n, size, subdirs int) *cpSet {
	b.Helper()
	rng := rand.NewChaCha8([32]byte{3})
	buf := make([]byte, size)
	for i := range subdirs {
		if err := os.MkdirAll(filepath.Join(dir, fmt.Sprintf("d%03d", i)), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for i := range n {
		_, _ = rng.Read(buf)
		p := filepath.Join(dir, fmt.Sprintf("d%03d", i%subdirs), fmt.Sprintf("f%05d", i))
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return &cpSet{label: fmt.Sprintf("%d × %s files", n, sizeLabel(int64(size))), key: "files", dir: dir, want: digestTree(b, dir)}
}

func sizeLabel(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func removeAll(b testing.TB, p string) {
	b.Helper()
	if err := os.RemoveAll(p); err != nil {
		b.Fatal(err)
	}
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func shJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shq(a)
	}
	return strings.Join(q, " ")
}

func listeningAddr(b testing.TB, r io.Reader) string {
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

func mustRun(b testing.TB, env []string, argv ...string) {
	b.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%v: %v\n%s", argv, err, out)
	}
}

func envInt(b testing.TB, key string, def int) int {
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
