package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkSession measures `ferry session save` and `ferry session
// restore` through the embedded gateway, in agent mode (the goals) and in
// POSIX mode (for comparison), against rsync and tar over OpenSSH, in one
// run:
//
//   - A session of agent-style JSONL (makeJSONLSet's generator), split into
//     sessionFiles files, FERRY_BENCH_SESSION bytes in all (default
//     128 MiB), in the sandbox. The first save is timed, next to the
//     first `rsync -a` of the tree over ssh to a host copy.
//   - Then a tenth of the files (4) grow by appended lines, 1% of the
//     session's bytes in all, and both save again: ferry into its store,
//     rsync into the host copy that holds the pre-append tree. Goals: the
//     bytes ferry moves (--json wire_bytes) at most 1.5× what rsync's
//     sender sent (rsync --stats "Total bytes sent": file list, block
//     matches and literal data, sandbox to host, the direction ferry's
//     count covers; what rsync's receiver sent back, its block checksums,
//     is shown alongside and not counted), and the wall time at most 1.0×
//     rsync's.
//   - The newest snapshot is restored into a fresh sandbox, against
//     `tar -cf - | ssh 127.0.0.1 tar -xf -` of the same tree from the host
//     copy (goal at most 0.6×, best of FERRY_BENCH_ROUNDS, default 2), and
//     the restored tree, unchanged, is saved again: the goal is at most 1%
//     of the session's bytes on the wire.
//   - ferry's peak RSS over every save and restore in agent mode, under
//     128 MiB.
//
// Each mode has a store of its own (--store), so that neither dedups
// against the other's chunks. Every copy is checked (files, bytes, and a
// CRC-32C over paths and contents). A missed goal is marked MISS in the
// summary; it does not fail the benchmark. TMPDIR=/dev/shm takes the disk
// out. FERRY_BENCH_SESSION_COMPRESS sets agent mode's --compress (default:
// ferry's own, auto).
func BenchmarkSession(b *testing.B) {
	needBench(b)
	size := int64(envInt(b, "FERRY_BENCH_SESSION", 128<<20))
	rounds := envInt(b, "FERRY_BENCH_ROUNDS", 2)
	s := startBench(b)
	s.compress = os.Getenv("FERRY_BENCH_SESSION_COMPRESS")
	modes := []string{"agent", "posix"}

	var rows []sessRow
	var agentRSS, posixRSS int64
	var sessBytes, appended int64
	for i := 0; i < b.N; i++ {
		rows = rows[:0]
		agentRSS, posixRSS = 0, 0
		rss := func(mode string, r result) {
			if mode == "agent" {
				agentRSS = max(agentRSS, r.maxRSS)
			} else {
				posixRSS = max(posixRSS, r.maxRSS)
			}
		}
		tmp := b.TempDir()
		stores := map[string]string{}
		for _, m := range modes {
			stores[m] = filepath.Join(tmp, "store-"+m)
		}
		const key = "bench-session"
		src := filepath.Join(s.sandbox, fmt.Sprintf("sess-%d", i))
		srcRel := filepath.Base(src)
		hostCopy := filepath.Join(tmp, "host", "sess") // rsync's and tar's side
		if err := os.MkdirAll(hostCopy, 0o755); err != nil {
			b.Fatal(err)
		}
		writeJSONLFiles(b, src, sessionFiles, size, 1000)
		want := digestTree(b, src)
		sessBytes = want.bytes

		// First save, and rsync's first copy.
		peer := s.rsync(b, src, hostCopy)
		checkTree(b, "rsync first copy", hostCopy, want)
		for _, m := range modes {
			f := s.ferrySession(b, m, stores[m], "save", "bench:"+srcRel, key)
			rss(m, f.result)
			rows = append(rows, sessRow{name: "first save", mode: m, ferry: f, peer: peer, peerName: "rsync"})
		}

		// A tenth of the files grow by 1% of the session in all.
		appended = appendJSONLFiles(b, src, sessionFiles/10, size/100, 2000)
		want = digestTree(b, src)
		sessBytes = want.bytes
		var second [2]sessResult
		for k, m := range modes {
			second[k] = s.ferrySession(b, m, stores[m], "save", "bench:"+srcRel, key)
			rss(m, second[k].result)
		}
		peer = s.rsync(b, src, hostCopy)
		checkTree(b, "rsync after the append", hostCopy, want)
		for k, m := range modes {
			rows = append(rows, sessRow{name: "save after append", mode: m, ferry: second[k], peer: peer, peerName: "rsync", goalWire: 1.5, goalTime: 1.0})
		}

		// Full restore into a fresh sandbox, against tar | ssh | tar.
		remote := filepath.Join(tmp, "remote")
		peers := []benchPeer{{"ssh", func(r int) (result, string) {
			dst := filepath.Join(remote, fmt.Sprintf("tar-%d", r))
			res := s.shPipe(b, fmt.Sprintf("tar -cf - -C %s %s | %s %s",
				shq(filepath.Dir(hostCopy)), shq(filepath.Base(hostCopy)),
				shJoin(s.sshArgv()), shq("mkdir -p "+shq(dst)+" && tar -xf - -C "+shq(dst))))
			checkTree(b, "ssh tar restore", filepath.Join(dst, filepath.Base(hostCopy)), want)
			return res, dst
		}}}
		var restored [2]sessResult
		for k, m := range modes {
			peers = append(peers, benchPeer{m, func(r int) (result, string) {
				name := fmt.Sprintf("sr-%s-%d-%d", m[:1], i, r)
				s.createSandbox(b, name)
				f := s.ferrySession(b, m, stores[m], "restore", key, name+":sess")
				checkTree(b, "ferry session restore --mode "+m, filepath.Join(s.root, name, "sess"), want)
				rss(m, f.result)
				if restored[k].seconds == 0 || f.seconds < restored[k].seconds {
					restored[k] = f
				}
				mustRun(b, s.ferryEnv, s.bin, "sandbox", "delete", name)
				return f.result, ""
			}})
		}
		best := bestOf(b, "session restore", rounds, peers)
		for k, m := range modes {
			restored[k].result = best[k+1]
			rows = append(rows, sessRow{name: "restore, new sandbox", mode: m, ferry: restored[k], peer: peerResult{result: best[0]}, peerName: "tar|ssh", goalTime: 0.6})
		}

		// The restored session, unchanged, saved again from a new sandbox.
		for _, m := range modes {
			name := fmt.Sprintf("su-%s-%d", m[:1], i)
			s.createSandbox(b, name)
			f := s.ferrySession(b, m, stores[m], "restore", key, name+":sess")
			rss(m, f.result)
			f = s.ferrySession(b, m, stores[m], "save", name+":sess", key)
			rss(m, f.result)
			rows = append(rows, sessRow{name: "save restored, unchanged", mode: m, ferry: f, goalFrac: 0.01})
			mustRun(b, s.ferryEnv, s.bin, "sandbox", "delete", name)
		}
		removeAll(b, src)
	}

	compress := s.compress
	if compress == "" {
		compress = "default"
	}
	fmt.Printf("\nferry session (--mode agent --compress %s, --mode posix), %s JSONL in %d files; append: %s to %d files; restore best of %d rounds\n",
		compress, sizeLabel(size), sessionFiles, sizeLabel(appended), sessionFiles/10, rounds)
	fmt.Printf("%-26s %-6s %8s %8s %-8s %10s %11s %11s %11s %12s\n",
		"case", "mode", "ferry s", "peer s", "peer", "ferry/peer", "ferry wire", "peer sent", "peer recv", "ferry RSS")
	for _, r := range rows {
		ps, ratio, sent, recv := "-", "-", "-", "-"
		if r.peerName != "" {
			ps = fmt.Sprintf("%.2f", r.peer.seconds)
			ratio = fmt.Sprintf("%.2f", r.ferry.seconds/r.peer.seconds)
			if r.peer.sent > 0 {
				sent, recv = byteLabel(r.peer.sent), byteLabel(r.peer.recv)
			}
		}
		fmt.Printf("%-26s %-6s %8.2f %8s %-8s %10s %11s %11s %11s %8.1f MiB\n",
			r.name, r.mode, r.ferry.seconds, ps, r.peerName, ratio, byteLabel(r.ferry.wire), sent, recv, float64(r.ferry.maxRSS)/1024)
	}

	fmt.Printf("\ngoals (agent mode)\n")
	mark := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	for _, r := range rows {
		if r.mode != "agent" {
			continue
		}
		if r.goalWire > 0 {
			x := float64(r.ferry.wire) / float64(r.peer.sent)
			fmt.Printf("  %-4s %s: wire bytes ferry/rsync-sent %.2f (%s vs %s; rsync both ways %s), goal <= %.2f\n",
				mark(x <= r.goalWire), r.name, x, byteLabel(r.ferry.wire), byteLabel(r.peer.sent), byteLabel(r.peer.sent+r.peer.recv), r.goalWire)
			b.ReportMetric(x, "append-wire-ferry/rsync")
		}
		if r.goalTime > 0 {
			x := r.ferry.seconds / r.peer.seconds
			fmt.Printf("  %-4s %s: wall time ferry/%s %.2f (%.2fs vs %.2fs), goal <= %.2f\n",
				mark(x <= r.goalTime), r.name, r.peerName, x, r.ferry.seconds, r.peer.seconds, r.goalTime)
			b.ReportMetric(x, strings.ReplaceAll(strings.ReplaceAll(r.name, " ", "-"), ",", "")+"-ferry/peer")
		}
		if r.goalFrac > 0 {
			x := float64(r.ferry.wire) / float64(sessBytes)
			fmt.Printf("  %-4s %s: wire bytes %s, %.3f%% of the session's %s, goal <= %.0f%%\n",
				mark(x <= r.goalFrac), r.name, byteLabel(r.ferry.wire), 100*x, byteLabel(sessBytes), 100*r.goalFrac)
			b.ReportMetric(100*x, "unchanged-wire-%")
		}
	}
	fmt.Printf("  %-4s ferry peak RSS over agent-mode saves and restores %.1f MiB, goal < 128 MiB (posix mode: %.1f MiB)\n\n",
		mark(agentRSS < 128<<10), float64(agentRSS)/1024, float64(posixRSS)/1024)
	b.ReportMetric(float64(agentRSS)/1024, "ferry-RSS-MiB")
}

// sessionFiles is how many JSONL files BenchmarkSession's session holds.
const sessionFiles = 40

// sessRow is one case of BenchmarkSession in one mode.
type sessRow struct {
	name, mode string
	ferry      sessResult
	peer       peerResult
	peerName   string  // "" for no peer
	goalWire   float64 // ferry wire / rsync sent, 0 for none
	goalTime   float64 // ferry / peer seconds, 0 for none
	goalFrac   float64 // ferry wire / session bytes, 0 for none
}

// sessResult is a timed `ferry session` command and its --json.
type sessResult struct {
	result
	files, newBytes, snapshot int64
}

// peerResult is a timed OpenSSH peer; for rsync, what its --stats says
// the sender sent and received.
type peerResult struct {
	result
	sent, recv int64
}

// ferrySession times `ferry --json --mode mode --store store session
// args...` with its peak RSS, and checks the mode its --json reports.
func (s *benchSetup) ferrySession(b testing.TB, mode, store string, args ...string) sessResult {
	b.Helper()
	argv := []string{s.bin, "--json", "--mode", mode, "--store", store}
	if mode == "agent" && s.compress != "" {
		argv = append(argv, "--compress", s.compress)
	}
	argv = append(append(argv, "session"), args...)
	link := s.linkStats()
	res, out := timed(b, argv, s.ferryEnvFor(argv), true)
	res.link = s.linkStats().Sub(link)
	var st struct {
		Files     int64  `json:"files"`
		Bytes     int64  `json:"bytes"`
		WireBytes int64  `json:"wire_bytes"`
		NewBytes  int64  `json:"new_bytes"`
		Snapshot  int64  `json:"snapshot"`
		Mode      string `json:"mode"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		b.Fatalf("ferry session --json %q: %v\n%s", args, err, out)
	}
	if st.Mode != mode {
		b.Fatalf("ferry session --mode %s %q ran in mode %q", mode, args, st.Mode)
	}
	res.bytes, res.wire, res.mode = st.Bytes, st.WireBytes, st.Mode
	return sessResult{result: res, files: st.Files, newBytes: st.NewBytes, snapshot: st.Snapshot}
}

var rsyncStat = regexp.MustCompile(`(?m)^Total bytes (sent|received): ([0-9,.]+)`)

// rsync times `rsync -a --stats src/ 127.0.0.1:dst/` over the bench's
// sshd and returns what its sender (this side, reading src) sent and
// received.
func (s *benchSetup) rsync(b testing.TB, src, dst string) peerResult {
	b.Helper()
	ssh := s.sshArgv()
	target := ssh[len(ssh)-1] + ":" + dst + "/"
	link := s.linkStats()
	res, out := timed(b, []string{"rsync", "-a", "--stats", "-e", shJoin(ssh[:len(ssh)-1]), src + "/", target}, nil, false)
	res.link = s.linkStats().Sub(link)
	p := peerResult{result: res}
	for _, m := range rsyncStat.FindAllStringSubmatch(string(out), -1) {
		n, err := strconv.ParseInt(strings.NewReplacer(",", "", ".", "").Replace(m[2]), 10, 64)
		if err != nil {
			b.Fatalf("rsync --stats: %q: %v", m[0], err)
		}
		if m[1] == "sent" {
			p.sent = n
		} else {
			p.recv = n
		}
	}
	if p.sent == 0 {
		b.Fatalf("rsync --stats printed no byte counts:\n%s", out)
	}
	return p
}

// checkTree fails the benchmark unless the tree at dir has digest want.
func checkTree(b testing.TB, what, dir string, want treeDigest) {
	b.Helper()
	(&cpSet{label: "the session", dir: dir, want: want}).check(b, what, dir)
}

// writeJSONLFiles writes n files session-NN.jsonl of about size/n bytes
// each into dir, from makeJSONLSet's generator seeded seed+i, each ending
// with a whole line.
func writeJSONLFiles(b testing.TB, dir string, n int, size int64, seed uint64) {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		writeJSONL(b, filepath.Join(dir, fmt.Sprintf("session-%02d.jsonl", i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, max(size/int64(n), 1), false, seed+uint64(i))
	}
}

// appendJSONLFiles appends size/n bytes or a little more of new lines to each of the
// first n files writeJSONLFiles wrote in dir and returns the bytes
// appended.
func appendJSONLFiles(b testing.TB, dir string, n int, size int64, seed uint64) int64 {
	b.Helper()
	var total int64
	for i := range n {
		total += writeJSONL(b, filepath.Join(dir, fmt.Sprintf("session-%02d.jsonl", i)), os.O_APPEND|os.O_WRONLY, max(size/int64(n), 1), true, seed+uint64(i))
	}
	return total
}

// writeJSONL writes whole lines of one generated session to the file
// opened with flag, about size bytes: at most size (but at least one
// line), or with atLeast, the fewest lines that make size or more. It
// returns the bytes written.
func writeJSONL(b testing.TB, path string, flag int, size int64, atLeast bool, seed uint64) int64 {
	b.Helper()
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	g := newJSONLGen(seed, loadCorpus(b))
	var line []byte
	var n int64
	for n < size {
		line = g.line(line[:0])
		if !atLeast && n > 0 && n+int64(len(line)) > size {
			break
		}
		if _, err := w.Write(line); err != nil {
			b.Fatal(err)
		}
		n += int64(len(line))
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return n
}

// byteLabel is n in B, KiB or MiB, one decimal.
func byteLabel(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
