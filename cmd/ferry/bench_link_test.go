package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/cmd/ferry/internal/linkemu"
)

// BenchmarkLink is issue 19: ferry against the peers users would reach a
// remote gateway with, over an emulated link (linkemu: a TCP proxy on
// 127.0.0.1 with a token bucket and a delay queue per direction) that both
// ferry's gateway connection and every peer's SSH connection cross, in the
// same run. Per profile (lan, region, far; FERRY_BENCH_LINK=region,far
// picks, "none" skips):
//
//   - Uploads and downloads of the data sets of BenchmarkCp (a random
//     file, small files, agent JSONL), scaled per profile so that a run
//     stays bounded (linkScaleFor; FERRY_BENCH_LINK_DIV divides them
//     further), by `tar | ssh | tar`, `ssh -C`, `tar | zstd -3 | ssh |
//     zstd -d | tar`, `rsync -az`, and ferry cp in POSIX and agent mode.
//   - A session of JSONL: the first save, the save after a 1% append
//     (rsync -az is the peer), and a restore into a fresh sandbox (tar over
//     ssh, ssh -C, zstd and rsync from a host copy are the peers).
//   - A whole `ferry run` of a realistic run directory (instructions and
//     context files up, `true`, the artifacts with an agent.ndjson the
//     sandbox wrote back), against the same by ssh and tar.
//
// Each row has its seconds, the bytes that crossed the link each way, and
// the round trips it waited for (linkemu.Stats.RoundTrips: a connection's
// handshake, and every turn of a side that was silent for half an RTT
// while the other side's answer reached it; a flow-control window that
// stalls a sender counts, so the floor forgives such stalls). A ferry
// row's floor is its own bytes in the busier direction over the link rate,
// plus its round trips times the RTT: what a link of that rate and delay
// cannot beat with those bytes and turns. The table shows ferry/floor and
// ferry/best-peer and marks the goals; bench.json (every row) and
// a PNG per profile go to FERRY_BENCH_OUT (default a directory under the
// system temp dir); the paths are printed. FERRY_BENCH_LINK_ROUNDS sets the
// rounds, each row's best taken (default 1, where the link sets the times,
// and 3 on lan, whose goal compares agent with POSIX mode on random data:
// both at the floor, within a round's noise of each other).
// FERRY_BENCH_CPUPROFILE=DIR has every ferry command write a CPU profile
// there (FERRY_CPUPROFILE), named after its arguments;
// FERRY_BENCH_LINK_SETS=session,run runs only those sets.
// FERRY_BENCH_LINK_TRACE=1 logs, for each ferry copy, when its data
// passed 1 MiB, 8 MiB and its end on the gateway's link (see traced). A missed goal is marked MISS; it does not fail
// the benchmark.
func BenchmarkLink(b *testing.B) {
	needBench(b)
	profiles := linkProfiles(b)
	if len(profiles) == 0 {
		b.Skip("FERRY_BENCH_LINK=none")
	}
	rounds := envInt(b, "FERRY_BENCH_LINK_ROUNDS", 0)
	div := int64(envInt(b, "FERRY_BENCH_LINK_DIV", 1))
	outDir := os.Getenv("FERRY_BENCH_OUT")
	if outDir == "" {
		outDir = filepath.Join(os.TempDir(), "ferry-bench")
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		b.Fatal(err)
	}
	var all []linkRow
	for i := 0; i < b.N; i++ {
		all = all[:0]
		for _, p := range profiles {
			start := time.Now()
			sc := linkScaleFor(p, div)
			r := rounds
			if r == 0 {
				r = 1
				if p.BitsPerSecond >= 1e9 {
					r = 3
				}
			}
			rows, notes := runLinkProfile(b, p, sc, r)
			printLinkTable(p, sc, rows, notes, time.Since(start))
			png := filepath.Join(outDir, "bench-"+p.Name+".png")
			if err := plotLink(png, p, rows); err != nil {
				b.Fatalf("plot %s: %v", png, err)
			}
			fmt.Printf("plot: %s\n", png)
			all = append(all, rows...)
		}
	}
	path := filepath.Join(outDir, "bench.json")
	data, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("bench.json: %s (%d rows)\n\n", path, len(all))
}

// linkProfiles are FERRY_BENCH_LINK's profiles: all of linkemu's by
// default, none for "none".
func linkProfiles(b testing.TB) []linkemu.Profile {
	b.Helper()
	v := os.Getenv("FERRY_BENCH_LINK")
	switch v {
	case "", "all":
		return linkemu.Profiles()
	case "none":
		return nil
	}
	var out []linkemu.Profile
	for name := range strings.SplitSeq(v, ",") {
		p, ok := linkemu.Lookup(strings.TrimSpace(name))
		if !ok {
			b.Fatalf("FERRY_BENCH_LINK=%q: no profile %q (lan, region, far)", v, name)
		}
		out = append(out, p)
	}
	return out
}

// linkScale is the data of one profile's run.
type linkScale struct {
	big, jsonl, session, ndjson int64 // bytes
	files                       int
}

// linkScaleFor keeps every transfer of profile p to seconds at its rate:
// 256 MiB take 2 s at 1 Gbit/s, 21 s at 100 Mbit/s and 107 s at
// 20 Mbit/s, for each of a dozen peers and directions; a profile takes
// 2 to 4 minutes on an idle machine. div divides every size.
func linkScaleFor(p linkemu.Profile, div int64) linkScale {
	var sc linkScale
	switch {
	case p.BitsPerSecond >= 1e9:
		// Half the loopback sets: at 1 Gbit/s they are still a second of
		// line time each, and the profile stays near 2 minutes.
		sc = linkScale{big: 128 << 20, jsonl: 128 << 20, session: 64 << 20, ndjson: 50e6, files: 10000}
	case p.BitsPerSecond >= 100e6:
		sc = linkScale{big: 64 << 20, jsonl: 64 << 20, session: 64 << 20, ndjson: 50e6, files: 10000}
	default:
		sc = linkScale{big: 16 << 20, jsonl: 16 << 20, session: 16 << 20, ndjson: 12e6, files: 2500}
	}
	sc.big, sc.jsonl, sc.session, sc.ndjson = sc.big/div, sc.jsonl/div, sc.session/div, sc.ndjson/div
	sc.files = max(sc.files/int(div), 100)
	return sc
}

// linkRow is one measured command: a row of bench.json.
type linkRow struct {
	Profile   string  `json:"profile"`
	Set       string  `json:"set"`
	Direction string  `json:"direction"` // up, down, save, save-append, restore, run
	Peer      string  `json:"peer"`
	Seconds   float64 `json:"seconds"`
	// Bytes is the payload (ferry's --json bytes; 0 for peers).
	Bytes int64 `json:"bytes,omitempty"`
	// WireUp and WireDown crossed the link, client to server and back.
	WireUp     int64 `json:"wire_up"`
	WireDown   int64 `json:"wire_down"`
	RoundTrips int64 `json:"round_trips"`
	Conns      int64 `json:"conns"`
	// Floor is a ferry row's floor in seconds; FloorRatio its seconds over
	// it.
	Floor      float64 `json:"floor_seconds,omitempty"`
	FloorRatio float64 `json:"ferry_over_floor,omitempty"`
	// Ratio is the row's seconds over the best non-ferry peer's in its case.
	Ratio     float64 `json:"ratio_to_best_peer"`
	BestPeer  string  `json:"best_peer"`
	MaxRSSKiB int64   `json:"max_rss_kib,omitempty"`
	// CPUSeconds is the command's user and system time on this machine
	// (a pipeline's every local stage).
	CPUSeconds float64 `json:"cpu_seconds"`

	isFerry bool
	mode    string // ferry's mode
	tarSSH  float64
	execRTs int64 // a bare ferry exec's round trips, for run rows
}

// linkCase is one case's contenders, named, each returning its result and
// a path to remove at the end of the round.
type linkCase struct {
	set, dir string
	peers    []benchPeer
	ferry    map[string]string // peer name -> ferry mode
}

// row turns bestOf's results for c into rows, with ratios and floors.
func (c linkCase) rows(p linkemu.Profile, res []result) []linkRow {
	best, bestName, tarSSH := math.Inf(1), "", 0.0
	for k, pe := range c.peers {
		if _, ok := c.ferry[pe.name]; ok {
			continue
		}
		if res[k].seconds < best {
			best, bestName = res[k].seconds, pe.name
		}
		if pe.name == "tar|ssh" {
			tarSSH = res[k].seconds
		}
	}
	var rows []linkRow
	for k, pe := range c.peers {
		r := res[k]
		row := linkRow{Profile: p.Name, Set: c.set, Direction: c.dir, Peer: pe.name, Seconds: r.seconds,
			Bytes: r.bytes, WireUp: r.link.Up, WireDown: r.link.Down, RoundTrips: r.link.RoundTrips(),
			Conns: r.link.Conns, BestPeer: bestName, MaxRSSKiB: r.maxRSS, CPUSeconds: r.cpu, tarSSH: tarSSH}
		if !math.IsInf(best, 1) {
			row.Ratio = r.seconds / best
		}
		if mode, ok := c.ferry[pe.name]; ok {
			row.isFerry, row.mode = true, mode
			row.Floor = float64(max(r.link.Up, r.link.Down))/p.BytesPerSecond() + float64(r.link.RoundTrips())*p.RTT().Seconds()
			row.FloorRatio = r.seconds / row.Floor
		}
		rows = append(rows, row)
	}
	return rows
}

// runLinkProfile measures every case over profile p.
func runLinkProfile(b testing.TB, p linkemu.Profile, sc linkScale, rounds int) ([]linkRow, []string) {
	b.Helper()
	s := startBenchLink(b, &p)
	// FERRY_BENCH_LINK_COMPRESS sets agent mode's --compress (default
	// auto), to weigh Auto's pick against a fixed codec on the link.
	s.compress = cmp.Or(os.Getenv("FERRY_BENCH_LINK_COMPRESS"), "auto")
	s.cpuProfiles = os.Getenv("FERRY_BENCH_CPUPROFILE")
	data := b.TempDir()
	want := linkSets(b)
	var sets []*cpSet
	for key, mk := range map[string]func() *cpSet{
		"big":   func() *cpSet { return makeBigSet(b, filepath.Join(data, "big"), sc.big) },
		"files": func() *cpSet { return makeSmallSet(b, filepath.Join(data, "files"), sc.files, 2<<10, 100) },
		"jsonl": func() *cpSet { return makeJSONLSet(b, filepath.Join(data, "jsonl"), sc.jsonl) },
	} {
		if want[key] {
			sets = append(sets, mk())
		}
	}
	slices.SortFunc(sets, func(x, y *cpSet) int { return cmp.Compare(setOrder[x.key], setOrder[y.key]) })
	remote, local := b.TempDir(), b.TempDir()
	// The agent installed once, outside the clock: every row is a warm
	// sandbox's (BenchmarkCp measures the install).
	warm := filepath.Join(data, "warm")
	if err := os.MkdirAll(warm, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(warm, "f"), []byte("warm"), 0o644); err != nil {
		b.Fatal(err)
	}
	s.ferryCp(b, "agent", warm, "bench:link-warm")
	removeAll(b, filepath.Join(s.sandbox, "link-warm"))
	ferryModes := map[string]string{"ferry posix": "posix", "ferry agent": "agent"}
	var rows []linkRow
	var notes []string
	for _, set := range sets {
		src := "link-" + set.key // the download source, uploaded (untimed) first
		parent, base := shq(filepath.Dir(set.dir)), shq(filepath.Base(set.dir))
		upPeers := []benchPeer{}
		for _, pe := range sshPeers {
			upPeers = append(upPeers, benchPeer{pe.name, func(r int) (result, string) {
				dst := filepath.Join(remote, fmt.Sprintf("%s-%s-%d", set.key, pe.key, r))
				var res result
				if pe.key == "rsync" {
					res = s.shPipe(b, fmt.Sprintf("rsync -az -e %s %s %s", shq(shJoin(s.sshHostless())), shq(set.dir), shq(s.sshHost()+":"+dst+"/")))
				} else {
					res = s.shPipe(b, fmt.Sprintf("tar -cf - -C %s %s %s| %s %s", parent, base, pe.pack,
						shJoin(s.sshArgv(pe.opts...)), shq("mkdir -p "+shq(dst)+" && "+pe.unpack+"tar -xf - -C "+shq(dst))))
				}
				set.check(b, pe.name+" up", filepath.Join(dst, filepath.Base(set.dir)))
				return res, dst
			}})
		}
		for _, name := range []string{"ferry posix", "ferry agent"} {
			mode := ferryModes[name]
			upPeers = append(upPeers, benchPeer{name, func(r int) (result, string) {
				rel := fmt.Sprintf("lup-%s-%s-%d", set.key, mode, r)
				res := s.traced(b, fmt.Sprintf("%s %s up, round %d", set.label, name, r), true, func() result {
					return s.ferryCp(b, mode, set.dir, "bench:"+rel)
				})
				set.check(b, name+" up", filepath.Join(s.sandbox, rel))
				return res, filepath.Join(s.sandbox, rel)
			}})
		}
		c := linkCase{set: set.label, dir: "up", peers: upPeers, ferry: ferryModes}
		rows = append(rows, c.rows(p, bestOf(b, p.Name+" upload "+set.label, rounds, upPeers))...)

		// The download source, put in place outside the clock.
		if err := os.CopyFS(filepath.Join(s.sandbox, src), os.DirFS(set.dir)); err != nil {
			b.Fatal(err)
		}
		sandboxSrc := filepath.Join(s.sandbox, src)
		downPeers := []benchPeer{}
		for _, pe := range sshPeers {
			downPeers = append(downPeers, benchPeer{pe.name, func(r int) (result, string) {
				dst := filepath.Join(local, fmt.Sprintf("%s-%s-%d", set.key, pe.key, r))
				if err := os.Mkdir(dst, 0o755); err != nil {
					b.Fatal(err)
				}
				var res result
				if pe.key == "rsync" {
					res = s.shPipe(b, fmt.Sprintf("rsync -az -e %s %s %s", shq(shJoin(s.sshHostless())), shq(s.sshHost()+":"+sandboxSrc), shq(dst+"/")))
				} else {
					res = s.shPipe(b, fmt.Sprintf("%s %s | %star -xf - -C %s", shJoin(s.sshArgv(pe.opts...)),
						shq("tar -cf - -C "+shq(s.sandbox)+" "+shq(src)+" "+pe.pack), pe.unpack, shq(dst)))
				}
				set.check(b, pe.name+" down", filepath.Join(dst, src))
				return res, dst
			}})
		}
		for _, name := range []string{"ferry posix", "ferry agent"} {
			mode := ferryModes[name]
			downPeers = append(downPeers, benchPeer{name, func(r int) (result, string) {
				dst := filepath.Join(local, fmt.Sprintf("ferry-%s-%s-%d", set.key, mode, r))
				res := s.traced(b, fmt.Sprintf("%s %s down, round %d", set.label, name, r), false, func() result {
					return s.ferryCp(b, mode, "bench:"+src, dst)
				})
				set.check(b, name+" down", dst)
				return res, dst
			}})
		}
		c = linkCase{set: set.label, dir: "down", peers: downPeers, ferry: ferryModes}
		rows = append(rows, c.rows(p, bestOf(b, p.Name+" download "+set.label, rounds, downPeers))...)
		removeAll(b, sandboxSrc)
	}
	if want["session"] {
		rows = append(rows, linkSession(b, s, p, sc, rounds)...)
	}
	if want["run"] {
		runRows, runNotes := linkRun(b, s, p, sc)
		rows, notes = append(rows, runRows...), append(notes, runNotes...)
	}
	return rows, notes
}

// traced runs the ferry command f; with FERRY_BENCH_LINK_TRACE set, it
// records the gateway's link meanwhile and logs when the bytes one way
// (up or down, the data's) reached 1 MiB, 8 MiB and all of them, from
// the command's first byte either way: its setup and first MiB, then its
// body, apart. (Session 19 found a new agent's first MiB on lan 20 ms
// behind tar's this way, while the bodies took the same time.)
func (s *benchSetup) traced(b testing.TB, what string, up bool, f func() result) result {
	b.Helper()
	if s.gwLink == nil || os.Getenv("FERRY_BENCH_LINK_TRACE") == "" {
		return f()
	}
	rec := s.gwLink.Record()
	res := f()
	s.gwLink.StopRecording()
	total := res.link.Down
	if up {
		total = res.link.Up
	}
	at := rec.Reached(up, 1<<20, 8<<20, total)
	ms := func(d time.Duration) string {
		if d < 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	}
	dir := "down"
	if up {
		dir = "up"
	}
	b.Logf("%s: 1 MiB %s at %s, 8 MiB at %s, all %s at %s", what, dir, ms(at[0]), ms(at[1]), byteLabel(total), ms(at[2]))
	return res
}

// setOrder is the order of the link's data sets in the table.
var setOrder = map[string]int{"big": 0, "files": 1, "jsonl": 2, "session": 3, "run": 4}

// linkSets are FERRY_BENCH_LINK_SETS's data sets (a comma list of big,
// files, jsonl, session, run; all by default): one row's sets, to
// iterate on it in a minute rather than the whole table's four.
func linkSets(b testing.TB) map[string]bool {
	v := os.Getenv("FERRY_BENCH_LINK_SETS")
	out := map[string]bool{}
	for k := range setOrder {
		out[k] = v == ""
	}
	for _, k := range strings.Split(v, ",") {
		if k == "" {
			continue
		}
		if _, ok := setOrder[k]; !ok {
			b.Fatalf("FERRY_BENCH_LINK_SETS=%q: no set %q (big, files, jsonl, session, run)", v, k)
		}
		out[k] = true
	}
	return out
}

// sshPeers are the OpenSSH contenders: pack and unpack go around tar on
// the sending and the receiving side.
var sshPeers = []struct {
	name, key    string
	opts         []string
	pack, unpack string
}{
	{name: "tar|ssh", key: "ssh"},
	{name: "ssh -C", key: "sshc", opts: []string{"-C"}},
	{name: "zstd|ssh", key: "zstd", pack: "| zstd -3 -q -c ", unpack: "zstd -d -q -c | "},
	{name: "rsync -az", key: "rsync"},
}

// sshHostless is sshArgv without its user@host: rsync's -e.
func (s *benchSetup) sshHostless() []string { a := s.sshArgv(); return a[:len(a)-1] }

// sshHost is sshArgv's user@host.
func (s *benchSetup) sshHost() string { a := s.sshArgv(); return a[len(a)-1] }

// linkSession is BenchmarkSession's cases over the link: the first save
// and the save after a 1% append (rsync -az, sandbox to host, as the
// peer), and a restore into a fresh sandbox against tar, ssh -C, zstd and
// rsync from the host copy.
func linkSession(b testing.TB, s *benchSetup, p linkemu.Profile, sc linkScale, rounds int) []linkRow {
	b.Helper()
	tmp := b.TempDir()
	src := filepath.Join(s.sandbox, "link-sess")
	writeJSONLFiles(b, src, sessionFiles, sc.session, 1000)
	want := digestTree(b, src)
	label := sizeLabel(sc.session) + " session"
	stores := map[string]string{"agent": filepath.Join(tmp, "store-agent"), "posix": filepath.Join(tmp, "store-posix")}
	hostCopy := filepath.Join(tmp, "host", "sess")
	if err := os.MkdirAll(hostCopy, 0o755); err != nil {
		b.Fatal(err)
	}
	const key = "link-session"
	rsyncDown := func(what string) result {
		res := s.shPipe(b, fmt.Sprintf("rsync -az -e %s %s %s", shq(shJoin(s.sshHostless())), shq(s.sshHost()+":"+src+"/"), shq(hostCopy+"/")))
		checkTree(b, what, hostCopy, want)
		return res
	}
	ferrySave := func(mode string) result {
		return s.ferrySession(b, mode, stores[mode], "save", "bench:link-sess", key).result
	}
	ferryModes := map[string]string{"ferry posix": "posix", "ferry agent": "agent"}
	var rows []linkRow
	for _, dir := range []string{"save", "save-append"} {
		if dir == "save-append" {
			appendJSONLFiles(b, src, sessionFiles/10, sc.session/100, 2000)
			want = digestTree(b, src)
		}
		peers := []benchPeer{
			{"rsync -az", func(int) (result, string) { return rsyncDown("rsync " + dir), "" }},
			{"ferry posix", func(int) (result, string) { return ferrySave("posix"), "" }},
			{"ferry agent", func(int) (result, string) { return ferrySave("agent"), "" }},
		}
		// One round: a second would find everything saved already.
		res := make([]result, len(peers))
		for k, pe := range peers {
			res[k], _ = pe.run(0)
		}
		rows = append(rows, linkCase{set: label, dir: dir, peers: peers, ferry: ferryModes}.rows(p, res)...)
	}

	remote := filepath.Join(tmp, "remote")
	parent, base := shq(filepath.Dir(hostCopy)), shq(filepath.Base(hostCopy))
	var peers []benchPeer
	for _, pe := range sshPeers {
		peers = append(peers, benchPeer{pe.name, func(r int) (result, string) {
			dst := filepath.Join(remote, fmt.Sprintf("%s-%d", pe.key, r))
			var res result
			if pe.key == "rsync" {
				res = s.shPipe(b, fmt.Sprintf("rsync -az -e %s %s %s", shq(shJoin(s.sshHostless())), shq(hostCopy), shq(s.sshHost()+":"+dst+"/")))
			} else {
				res = s.shPipe(b, fmt.Sprintf("tar -cf - -C %s %s %s| %s %s", parent, base, pe.pack,
					shJoin(s.sshArgv(pe.opts...)), shq("mkdir -p "+shq(dst)+" && "+pe.unpack+"tar -xf - -C "+shq(dst))))
			}
			checkTree(b, pe.name+" restore", filepath.Join(dst, "sess"), want)
			return res, dst
		}})
	}
	for _, name := range []string{"ferry posix", "ferry agent"} {
		mode := ferryModes[name]
		peers = append(peers, benchPeer{name, func(r int) (result, string) {
			sb := fmt.Sprintf("lr-%s-%d", mode[:1], r)
			s.createSandbox(b, sb)
			res := s.ferrySession(b, mode, stores[mode], "restore", key, sb+":sess").result
			checkTree(b, name+" restore", filepath.Join(s.root, sb, "sess"), want)
			mustRun(b, s.ferryEnv, s.bin, "sandbox", "delete", sb)
			return res, ""
		}})
	}
	rows = append(rows, linkCase{set: label, dir: "restore", peers: peers, ferry: ferryModes}.rows(p, bestOf(b, p.Name+" session restore", rounds, peers))...)
	removeAll(b, src)
	return rows
}

// linkRun is a whole `ferry run` over the link: instructions and context
// files up, `true`, and the artifacts back, agent.ndjson among them,
// written in the sandbox beforehand as an agent would have; against
// `tar | ssh 'tar -x && true'` and `ssh tar | tar` of the same. A bare
// `ferry exec -- true` on the same link gives the exec's own round trips,
// so that the run's setup beyond them shows.
func linkRun(b testing.TB, s *benchSetup, p linkemu.Profile, sc linkScale) ([]linkRow, []string) {
	b.Helper()
	const sb = "link-run"
	s.createSandbox(b, sb)
	in := filepath.Join(b.TempDir(), "in")
	c := loadCorpus(b)
	if err := os.MkdirAll(filepath.Join(in, "context"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(in, "instructions.md"), []byte("# Task\n\n"+strings.Join(c.prose[:40], "\n\n")+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	for i, f := range c.files[:24] {
		if err := os.WriteFile(filepath.Join(in, "context", fmt.Sprintf("%02d-%s", i, filepath.Base(f.path))), []byte(strings.Join(f.lines, "\n")), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	inputs := digestTree(b, in)
	meta := filepath.Join(s.root, sb, "rascal-meta")
	if err := os.MkdirAll(meta, 0o755); err != nil {
		b.Fatal(err)
	}
	writeJSONL(b, filepath.Join(meta, "agent.ndjson"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, sc.ndjson, false, 3000)
	if err := os.WriteFile(filepath.Join(meta, "meta.json"), []byte(`{"exit_code":0}`+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	artifacts := digestTree(b, meta)
	const label = "run dir"
	note := fmt.Sprintf("run dir: %s of instructions and context up, `true`, %s of artifacts (agent.ndjson, meta.json) back", byteLabel(inputs.bytes), byteLabel(artifacts.bytes))
	outs := b.TempDir()

	var rows []linkRow
	peers := []benchPeer{{"tar|ssh", func(r int) (result, string) {
		out := filepath.Join(outs, fmt.Sprintf("ssh-%d", r))
		if err := os.Mkdir(out, 0o755); err != nil {
			b.Fatal(err)
		}
		dst := filepath.Join(s.root, sb, "ssh-in")
		res := s.shPipe(b, fmt.Sprintf("tar -cf - -C %s . | %s %s && %s %s | tar -xf - -C %s",
			shq(in), shJoin(s.sshArgv()), shq("mkdir -p "+shq(dst)+" && tar -xf - -C "+shq(dst)+" && true"),
			shJoin(s.sshArgv()), shq("tar -cf - -C "+shq(meta)+" ."), shq(out)))
		checkTree(b, "ssh run artifacts", out, artifacts)
		return res, dst
	}}}
	for _, mode := range []string{"posix", "agent"} {
		peers = append(peers, benchPeer{"ferry " + mode, func(r int) (result, string) {
			out := filepath.Join(outs, fmt.Sprintf("%s-%d", mode, r))
			argv := []string{s.bin, "--json", "--mode", mode, "run", sb, "--in", in + "/instructions.md:work/instructions.md",
				"--in", filepath.Join(in, "context") + ":work/context", "--out", out, "--follow=false", "--", "true"}
			link := s.linkStats()
			res, stdout := timed(b, argv, s.ferryEnvFor(argv), true)
			res.link = s.linkStats().Sub(link)
			var rr struct {
				ExitCode int `json:"exit_code"`
			}
			if err := json.Unmarshal(stdout, &rr); err != nil || rr.ExitCode != 0 {
				b.Fatalf("ferry run --mode %s: %v, %s", mode, err, stdout)
			}
			for _, a := range []string{"agent.ndjson", "meta.json"} {
				want, _ := os.ReadFile(filepath.Join(meta, a))
				got, err := os.ReadFile(filepath.Join(out, a))
				if err != nil || !slices.Equal(got, want) {
					b.Fatalf("ferry run --mode %s: %s not pulled whole (%d of %d bytes): %v", mode, a, len(got), len(want), err)
				}
			}
			checkTree(b, "ferry run inputs", filepath.Join(s.root, sb, "work"), inputs)
			res.bytes = inputs.bytes + artifacts.bytes
			return res, filepath.Join(s.root, sb, "work")
		}})
	}
	res := make([]result, len(peers))
	for k, pe := range peers {
		var trash string
		res[k], trash = pe.run(0)
		removeAll(b, trash)
	}
	rows = append(rows, linkCase{set: label, dir: "run", peers: peers, ferry: map[string]string{"ferry posix": "posix", "ferry agent": "agent"}}.rows(p, res)...)

	notes := []string{note}
	for _, mode := range []string{"posix", "agent"} {
		link := s.linkStats()
		ex, _ := timed(b, []string{s.bin, "--mode", mode, "exec", sb, "--", "true"}, s.ferryEnv, false)
		st := s.linkStats().Sub(link)
		notes = append(notes, fmt.Sprintf("ferry exec -- true (the exec alone, %s mode's client): %.3f s, %d round trips (%d conns, %d turns)", mode, ex.seconds, st.RoundTrips(), st.Conns, st.Turns))
		for i := range rows {
			if rows[i].Peer == "ferry "+mode {
				rows[i].execRTs = st.RoundTrips()
			}
		}
	}
	return rows, notes
}

// printLinkTable prints one profile's rows and its goals.
func printLinkTable(p linkemu.Profile, sc linkScale, rows []linkRow, notes []string, took time.Duration) {
	fmt.Printf("\nlink %s, RTT %v: %s random, %d × 2 KiB, %s JSONL, %s session, %s agent.ndjson (scaled to the link; %.0f s in all)\n",
		p, p.RTT(), sizeLabel(sc.big), sc.files, sizeLabel(sc.jsonl), sizeLabel(sc.session), byteLabel(sc.ndjson), took.Seconds())
	fmt.Printf("%-20s %-11s %-11s %8s %7s %10s %10s %5s %6s %8s %11s\n", "case", "dir", "peer", "s", "cpu s", "wire up", "wire down", "RTs", "/best", "floor s", "ferry/floor")
	for _, r := range rows {
		floor, fr := "", ""
		if r.isFerry {
			floor, fr = fmt.Sprintf("%.2f", r.Floor), fmt.Sprintf("%.2f", r.FloorRatio)
		}
		fmt.Printf("%-20s %-11s %-11s %8.2f %7.2f %10s %10s %5d %6.2f %8s %11s\n", r.Set, r.Direction, r.Peer, r.Seconds, r.CPUSeconds,
			byteLabel(r.WireUp), byteLabel(r.WireDown), r.RoundTrips, r.Ratio, floor, fr)
	}
	for _, n := range notes {
		fmt.Printf("  %s\n", n)
	}
	fmt.Printf("\ngoals on %s (agent mode)\n", p.Name)
	mark := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "MISS"
	}
	find := func(r linkRow, peer string) (linkRow, bool) {
		for _, x := range rows {
			if x.Set == r.Set && x.Direction == r.Direction && x.Peer == peer {
				return x, true
			}
		}
		return linkRow{}, false
	}
	var rssT, rssS int64
	for _, r := range rows {
		if r.Peer != "ferry agent" {
			continue
		}
		what := r.Set + " " + r.Direction
		session := strings.HasPrefix(r.Direction, "save") || r.Direction == "restore"
		if session {
			rssS = max(rssS, r.MaxRSSKiB)
		} else if r.Direction != "run" {
			rssT = max(rssT, r.MaxRSSKiB)
		}
		switch {
		case r.Direction == "run":
			if p.Name == "region" || p.Name == "far" {
				extra := r.RoundTrips - r.execRTs
				fmt.Printf("  %-4s %-40s %.2f s, %d round trips, %d beyond a bare exec's %d, goal <= 3\n", mark(extra <= 3), what, r.Seconds, r.RoundTrips, extra, r.execRTs)
			}
		case p.Name == "lan":
			if px, ok := find(r, "ferry posix"); ok {
				fmt.Printf("  %-4s %-40s agent %.2f s vs posix %.2f s, goal agent <= posix\n", mark(r.Seconds <= px.Seconds), what, r.Seconds, px.Seconds)
			}
			if r.tarSSH > 0 && !session {
				x := r.Seconds / r.tarSSH
				fmt.Printf("  %-4s %-40s ferry/tar|ssh %.2f, goal <= 0.60\n", mark(x <= 0.6), what, x)
			}
		default:
			goal := 0.8
			switch r.Direction {
			case "save", "save-append":
				goal = 0 // rsync's own goal below
			}
			if r.Direction == "save-append" {
				fmt.Printf("  %-4s %-40s ferry/rsync %.2f, goal <= 0.30\n", mark(r.Ratio <= 0.3), what, r.Ratio)
			}
			if goal > 0 {
				// A goal under the row's floor asks for less time than
				// the link needs for ferry's own bytes and round trips:
				// on incompressible data no peer sends fewer bytes, so
				// the floor is every peer's too.
				bound := ""
				if at := goal * r.Seconds / r.Ratio; r.Ratio > goal && r.Floor > 0 && at < r.Floor {
					bound = fmt.Sprintf(": %.2f s, under the floor %.2f s", at, r.Floor)
				}
				fmt.Printf("  %-4s %-40s ferry/best-peer %.2f (%s), goal <= %.2f%s\n", mark(r.Ratio <= goal), what, r.Ratio, r.BestPeer, goal, bound)
			}
			if !session {
				fmt.Printf("  %-4s %-40s ferry/floor %.2f (floor %.2f s), goal <= 1.30\n", mark(r.FloorRatio <= 1.3), what, r.FloorRatio, r.Floor)
			}
			if strings.Contains(r.Set, "JSONL") && r.tarSSH > 0 {
				x := r.Seconds / r.tarSSH
				fmt.Printf("  %-4s %-40s ferry/tar|ssh %.2f, goal <= 0.35\n", mark(x <= 0.35), what, x)
			}
		}
	}
	fmt.Printf("  %-4s ferry peak RSS, transfers %.1f MiB (goal < 64), sessions %.1f MiB (goal < 128)\n",
		mark(rssT < 64<<10 && rssS < 128<<10), float64(rssT)/1024, float64(rssS)/1024)
}
