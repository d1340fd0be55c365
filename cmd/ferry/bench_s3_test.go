package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/session/s3store/s3test"
)

// BenchmarkSessionS3 measures `ferry session save` and `ferry session
// restore` (agent mode, through the embedded gateway) with the store on
// S3, versitygw on loopback, against the same with the store in a local
// directory: issue 6's goal is S3 at most 1.5× local.
//
//   - The session is BenchmarkSession's: FERRY_BENCH_SESSION bytes
//     (default 128 MiB) of agent-style JSONL in sessionFiles files. The
//     first save is timed, then a tenth of the files grow by 1% of the
//     session and the save after the append is timed.
//   - The newest snapshot is restored into a fresh sandbox, best of
//     FERRY_BENCH_ROUNDS (default 2): from the local store; from S3 by a
//     node that has never seen the session (an empty chunk cache, as on
//     another machine); and from S3 by the node that saved it (its cache
//     holds every chunk, so no chunk is downloaded). The CLI stores
//     chunks on S3 in packs (session.Config.Pack), the local directory
//     one file per chunk.
//
// Each store is fresh, and each S3 case runs with a chunk cache of its
// own ($FERRY_CACHE_DIR). TMPDIR=/dev/shm takes the disk out of both
// stores (versitygw's posix backend writes under TMPDIR too). A missed
// goal is marked MISS; it does not fail the benchmark.
func BenchmarkSessionS3(b *testing.B) {
	needBench(b)
	size := int64(envInt(b, "FERRY_BENCH_SESSION", 128<<20))
	rounds := envInt(b, "FERRY_BENCH_ROUNDS", 2)
	s := startBench(b)
	srv := s3test.Start(b)
	const key = "bench-session-s3"

	type row struct {
		name        string
		local, s3   float64 // seconds
		note        string
		goal        float64 // s3/local
		localN, s3N int64   // new bytes stored (saves)
		rssL, rssS3 int64   // KiB
	}
	var rows []row
	for i := 0; i < b.N; i++ {
		rows = rows[:0]
		tmp := b.TempDir()
		localStore := filepath.Join(tmp, "store-local")
		s3Store := fmt.Sprintf("s3://%s/bench-%d", srv.Bucket, i)
		// node is s with the S3 credentials and a chunk cache of its own.
		node := func(cache string) *benchSetup {
			n := *s
			n.ferryEnv = append(slices.Clone(s.ferryEnv),
				"AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey,
				"AWS_REGION="+srv.Region, "AWS_ENDPOINT_URL="+srv.Endpoint,
				"FERRY_CACHE_DIR="+filepath.Join(tmp, cache))
			return &n
		}
		saver := node("cache-saver")

		src := filepath.Join(s.sandbox, fmt.Sprintf("s3sess-%d", i))
		srcRel := filepath.Base(src)
		writeJSONLFiles(b, src, sessionFiles, size, 1000)
		want := digestTree(b, src)

		save := func(name string) {
			l := s.ferrySession(b, "agent", localStore, "save", "bench:"+srcRel, key)
			r := saver.ferrySession(b, "agent", s3Store, "save", "bench:"+srcRel, key)
			rows = append(rows, row{name: name, local: l.seconds, s3: r.seconds, goal: 1.5,
				localN: l.newBytes, s3N: r.newBytes, rssL: l.maxRSS, rssS3: r.maxRSS})
		}
		save("first save")
		appendJSONLFiles(b, src, sessionFiles/10, size/100, 2000)
		want = digestTree(b, src)
		save("save after append")

		restore := func(n *benchSetup, store, tag string) func(r int) (result, string) {
			return func(r int) (result, string) {
				name := fmt.Sprintf("s3r-%s-%d-%d", tag, i, r)
				s.createSandbox(b, name)
				f := n.ferrySession(b, "agent", store, "restore", key, name+":sess")
				checkTree(b, "ferry session restore from "+tag, filepath.Join(s.root, name, "sess"), want)
				mustRun(b, s.ferryEnv, s.bin, "sandbox", "delete", name)
				return f.result, ""
			}
		}
		cold := 0
		best := bestOf(b, "session restore, local vs S3", rounds, []benchPeer{
			{"local", restore(s, localStore, "local")},
			{"s3-cold", func(r int) (result, string) {
				// A node that has never seen the session: a new cache.
				cold++
				return restore(node(fmt.Sprintf("cache-cold-%d", cold)), s3Store, "s3-cold")(r)
			}},
			{"s3-warm", restore(saver, s3Store, "s3-warm")},
		})
		rows = append(rows,
			row{name: "restore, other node", local: best[0].seconds, s3: best[1].seconds, goal: 1.5, note: "empty chunk cache",
				rssL: best[0].maxRSS, rssS3: best[1].maxRSS},
			row{name: "restore, saving node", local: best[0].seconds, s3: best[2].seconds, goal: 1.5, note: "cache holds every chunk",
				rssL: best[0].maxRSS, rssS3: best[2].maxRSS})
		removeAll(b, src)
	}

	fmt.Printf("\nferry session, store local vs S3 (versitygw on loopback), --mode agent, %s JSONL in %d files; restore best of %d rounds\n",
		sizeLabel(size), sessionFiles, rounds)
	fmt.Printf("%-22s %8s %8s %9s %11s %11s %10s %10s  %s\n", "case", "local s", "s3 s", "s3/local", "local new", "s3 new", "local RSS", "s3 RSS", "")
	for _, r := range rows {
		x := r.s3 / r.local
		mark := "PASS"
		if x > r.goal {
			mark = "MISS"
		}
		newL, newS := "-", "-"
		if strings.HasPrefix(r.name, "save") || strings.HasPrefix(r.name, "first") {
			newL, newS = byteLabel(r.localN), byteLabel(r.s3N)
		}
		fmt.Printf("%-22s %8.2f %8.2f %9.2f %11s %11s %6.1f MiB %6.1f MiB  %s (goal <= %.1f) %s\n",
			r.name, r.local, r.s3, x, newL, newS, float64(r.rssL)/1024, float64(r.rssS3)/1024, mark, r.goal, r.note)
		b.ReportMetric(x, strings.ReplaceAll(strings.ReplaceAll(r.name, " ", "-"), ",", "")+"-s3/local")
	}
	fmt.Println()
}
