package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
	"github.com/ferry-dev/ferry/transfer/posix"
)

// SaveSpec says what SaveFrom saves.
type SaveSpec struct {
	// Dir is the directory in the sandbox, relative to its workspace root
	// or absolute.
	Dir string
	// Key is the session key the snapshot is committed under.
	Key string
}

// SaveResult is what SaveFrom stored, in the shape `ferry
// session save --json` prints.
type SaveResult struct {
	Key       string  `json:"key"`
	Snapshot  int64   `json:"snapshot"` // the sequence number committed
	Files     int64   `json:"files"`
	Bytes     int64   `json:"bytes"`      // of file contents in the snapshot
	NewBytes  int64   `json:"new_bytes"`  // plaintext of the chunks this save stored
	NewChunks int64   `json:"new_chunks"` // chunks this save stored
	WireBytes int64   `json:"wire_bytes"`
	Seconds   float64 `json:"seconds"`
	Mode      string  `json:"mode"`
	// RelayLost is set when the channel to the sandbox failed after the
	// commit (a relay lost, or the agent's exit status unreadable): the
	// snapshot is committed and complete all the same, so the save
	// succeeded, and a retry would only store the same tree again. It
	// holds the channel's error.
	RelayLost string `json:"relay_lost,omitempty"`
}

// SaveFrom stores the directory spec.Dir of r's sandbox as the next
// snapshot of spec.Key. The commit is Save's: of two saves of one key
// that race, one commits and the other fails with an error matching
// ErrConflict that names the key, having committed nothing.
//
// In agent mode the agent chunks and hashes the directory next to the
// data and only chunks the store lacks cross the relay; files whose size
// and mtime match the last snapshot are not read. POSIX mode downloads the
// whole directory into a private temp directory on this host (0700,
// removed afterwards) and chunks it here; the store still dedups. Both
// modes refuse what a restore would refuse, naming the entry: a symlink
// that resolves outside the directory (archive.ErrLinkEscape: by the
// download's extractor in POSIX mode, by Save in agent mode), a
// tree over the restore's limits (archive.ErrLimit).
//
// A save that returns no error committed its snapshot, even when the
// channel failed after the commit: that failure is in the result's
// RelayLost, not an error. An error means nothing was committed (a
// commit's own result is the store's: once Save has returned the
// manifest, the snapshot is in the store).
func (st *Store) SaveFrom(ctx context.Context, r transfer.Remote, spec SaveSpec) (SaveResult, error) {
	return st.SaveVia(ctx, r.Target().Name, func(context.Context) (transfer.Remote, error) { return r, nil }, spec)
}

// SaveVia is SaveFrom through the remote that remote returns, which may
// still be connecting to sandbox name: the store's own part of the save
// (its lock, the snapshot it starts from, the check of that snapshot's
// chunks) runs first, and remote is waited for only when the scan
// begins. An error of remote is returned as it is.
func (st *Store) SaveVia(ctx context.Context, name string, remote func(context.Context) (transfer.Remote, error), spec SaveSpec) (SaveResult, error) {
	start := time.Now()
	remoteDir, key := spec.Dir, spec.Key
	if err := ValidKey(key); err != nil {
		return SaveResult{}, err
	}
	src := &remoteSource{remote: remote, dir: remoteDir}
	m, err := st.Save(ctx, key, src)
	if src.early != nil {
		return SaveResult{}, src.early
	}
	if err != nil {
		if src.r == nil {
			return SaveResult{}, fmt.Errorf("save session %s:%s: %w", name, remoteDir, err)
		}
		// The agent's scan refuses a directory that is missing or is
		// not one by itself, so in agent mode the stat that explains it
		// is made only when a save fails: a round trip less on every
		// save.
		if src.r.Agent() != nil && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) {
			if serr := sourceDir(ctx, src.r, remoteDir, "save session", "save session"); serr != nil {
				return SaveResult{}, serr
			}
		}
		return SaveResult{}, fmt.Errorf("save session %s:%s: %w", name, remoteDir, err)
	}
	return SaveResult{
		Key: key, Snapshot: m.Seq, Files: m.Files, Bytes: m.Bytes,
		NewBytes: m.NewBytes, NewChunks: m.NewChunks, WireBytes: src.wire(),
		Seconds: time.Since(start).Seconds(), Mode: src.r.Mode().String(),
	}, nil
}

// remoteSource is the Source of a save through a remote it waits for
// when the scan begins: sourceFrom's, once the remote is there.
type remoteSource struct {
	remote func(context.Context) (transfer.Remote, error)
	dir    string
	r      transfer.Remote
	wire   func() int64
	// early is an error that ends the save as it is: the remote's, or
	// POSIX mode's stat of a source that is not a directory.
	early error
}

func (s *remoteSource) Scan(ctx context.Context, prev *Parent, sink Sink) error {
	r, err := s.remote(ctx)
	if err != nil {
		s.early = err
		return err
	}
	s.r = r
	if r.Agent() == nil {
		if err := sourceDir(ctx, r, s.dir, "save session", "save session"); err != nil {
			s.early = err
			return err
		}
	}
	var src Source
	src, s.wire = sourceFrom(r, s.dir)
	return src.Scan(ctx, prev, sink)
}

// sourceDir is nil when remoteDir, symlinks followed, is a directory,
// and otherwise the error of the operation op (its stat named statOp):
// transfer.ErrNoSource or ErrNotDir.
func sourceDir(ctx context.Context, r transfer.Remote, remoteDir, statOp, op string) error {
	name := r.Target().Name
	kind, err := r.Stat(ctx, remoteDir, true)
	if err != nil {
		return fmt.Errorf("%s: stat %s:%s: %w", statOp, name, remoteDir, err)
	}
	switch kind {
	case archive.Dir:
		return nil
	case archive.Missing:
		return fmt.Errorf("%s %s:%s: %w", op, name, remoteDir, transfer.ErrNoSource)
	default:
		return fmt.Errorf("%s %s:%s: %w", op, name, remoteDir, transfer.ErrNotDir)
	}
}

// sourceFrom is the Source a save reads the directory dir of
// the sandbox from, through r, and a function that reports the bytes it
// moved through the channel once the save is over. It is the one place
// where a mode chooses how a session leaves the sandbox: the agent chunks
// and hashes next to the data; POSIX mode downloads the whole directory
// and chunks it on the host (the store still dedups).
func sourceFrom(r transfer.Remote, dir string) (Source, func() int64) {
	if c := r.Agent(); c != nil {
		// Chunked and hashed next to the data; only what the store lacks
		// crosses the relay, and files unchanged since the last snapshot
		// are not read at all.
		src := &AgentSource{Client: c, Dir: dir, ReuseUnchanged: true, Compress: r.Target().Compress}
		return src, func() int64 { return src.WireBytes }
	}
	d := &downloadSource{r: r, dir: dir}
	return d, d.wire.Load
}

// downloadSource is a Source that downloads the sandbox's
// directory whole into a private temp directory on this host and scans
// that as a DirSource. The store still dedups: only chunks it
// lacks are written.
type downloadSource struct {
	r    transfer.Remote
	dir  string
	wire atomic.Int64
}

var _ Source = (*downloadSource)(nil)

// Scan implements Source. The temp directory is 0700 (a session
// may hold credentials, such as codex's auth.json) and is removed before
// Scan returns.
func (d *downloadSource) Scan(ctx context.Context, prev *Parent, sink Sink) error {
	tmp, err := os.MkdirTemp("", "ferry-session-*")
	if err != nil {
		return fmt.Errorf("download %s: %w", d.dir, err)
	}
	defer archive.RemoveTree(tmp)
	local := filepath.Join(tmp, "tree")
	cs, err := d.r.Download(ctx, transfer.DownloadSpec{Dir: d.dir, Names: []string{"."}, Local: local, Place: archive.PlaceNew})
	d.wire.Add(cs.WireBytes)
	if err != nil {
		return fmt.Errorf("download %s: %w", d.dir, err)
	}
	// Every file was just written here, so reusing chunk lists by size
	// and mtime would save no wire bytes, only local reads.
	return DirSource{Dir: local}.Scan(ctx, prev, sink)
}

// RestoreSpec says what RestoreTo restores, and where.
type RestoreSpec struct {
	// Key is the session key to restore.
	Key string
	// Dir is the directory in the sandbox to restore into.
	Dir string
	// Seq is the snapshot to restore; 0 is the newest.
	Seq int64
	// Replace allows a non-empty target, whose content is replaced whole.
	Replace bool
	// AllowMissing makes a key without any snapshot (a task's first run)
	// a successful restore of nothing, reported in the result's Missing.
	AllowMissing bool
}

// RestoreResult is what RestoreTo placed, in the shape `ferry
// session restore --json` prints.
type RestoreResult struct {
	Key      string `json:"key"`
	Snapshot int64  `json:"snapshot"` // 0 if Missing
	// Missing: the key has no snapshot and AllowMissing made that a
	// no-op; nothing was written.
	Missing   bool    `json:"missing,omitempty"`
	Files     int64   `json:"files"`
	Dirs      int64   `json:"dirs"`
	Symlinks  int64   `json:"symlinks"`
	Bytes     int64   `json:"bytes"`
	WireBytes int64   `json:"wire_bytes"`
	Seconds   float64 `json:"seconds"`
	Mode      string  `json:"mode"`
}

// RestoreTo writes snapshot spec.Seq (the newest if 0) of spec.Key into
// the directory spec.Dir of r's sandbox, with its modes, nanosecond
// mtimes, symlinks and empty directories. A chunk the snapshot needs that
// is missing from the store fails the restore before the sandbox is
// touched, with an *IntegrityError. In agent mode the chunks travel
// as stored (compressed) and the agent checks each one's content against
// its id before writing any of it; in POSIX mode the host reads and checks
// them all first, then streams the tree as tar. Either way a corrupt chunk
// fails the restore with an *IntegrityError naming it, and the tree
// is placed only once the sandbox has checked the whole of it: nothing is
// written to spec.Dir.
//
// A missing spec.Dir is created (0700, with its parents); an empty one
// receives the tree, and so does one that holds nothing but the staging
// directory a cut restore into it left (which goes). A non-empty one is
// refused with an error matching ErrNotEmpty unless
// spec.Replace; then the tree is placed as a
// hidden new sibling of spec.Dir and swapped in by one exec of sh: the
// old directory is renamed aside, the new one renamed to spec.Dir (the
// old one is renamed back if that fails), and the old one removed. A
// channel cut between the two renames leaves both under hidden names
// beside spec.Dir (".ferry-restore-*"), never neither. A key without
// snapshots matches ErrNoSnapshot unless spec.AllowMissing.
//
// Limitations: the target probe and the swap are execs of the sandbox's
// sh in both modes (no agent RPC for them yet), and their few bytes are
// not counted in WireBytes. In agent mode a symlink that resolves outside
// the restored tree is refused, as the agent's extractor refuses it; POSIX
// mode writes it as saved.
//
// A target the remote reports missing (a fresh sandbox, the usual case)
// costs no exec beyond r's; an existing one is probed, and a replaced one
// swapped, by the sandbox's sh.
func (st *Store) RestoreTo(ctx context.Context, r transfer.Remote, spec RestoreSpec) (RestoreResult, error) {
	// r is connected: its mode is known, whatever t asked for.
	t := r.Target()
	t.Mode = transfer.ModePOSIX
	if r.Agent() != nil {
		t.Mode = transfer.ModeAgent
	}
	p, err := st.PlanRestore(ctx, spec, t)
	if err != nil {
		return RestoreResult{}, err
	}
	defer p.Close()
	return p.To(ctx, r)
}

// RestorePlan is a restore whose snapshot is loaded and checked before
// the sandbox is reached, and whose chunks, when they may travel as one
// zstd stream, may be encoded already (StartStream): so that the encoder,
// on a slow link a restore's slowest part, runs beside the connection's
// setup. PlanRestore makes one; To runs it; Close stops what it started.
type RestorePlan struct {
	st        *Store
	spec      RestoreSpec
	start     time.Time
	m         *Manifest // nil: no snapshot, and spec.AllowMissing
	full      bool      // every chunk was read and checked (POSIX mode's check)
	mayStream bool
	early     *earlyStream
}

// PlanRestore loads and checks the snapshot spec names, for a restore
// through a remote of target t (its Mode and Compress say how the chunks
// will travel; RestoreTo's rules hold).
func (st *Store) PlanRestore(ctx context.Context, spec RestoreSpec, t transfer.Target) (*RestorePlan, error) {
	p := &RestorePlan{st: st, spec: spec, start: time.Now()}
	if err := checkSessionPath(spec.Dir); err != nil {
		return nil, err
	}
	m, err := st.Load(ctx, spec.Key, spec.Seq)
	if errors.Is(err, ErrNoSnapshot) && spec.AllowMissing && spec.Seq == 0 {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("restore session %s: %w", spec.Key, err)
	}
	p.m = m
	// The agent checks every chunk's content before writing it; POSIX
	// mode's tar cannot, so the host reads and checks them all first.
	viaAgent := t.MayUseAgent()
	check := st.Check
	if viaAgent {
		check = st.CheckPresent
	}
	if err := check(ctx, m); err != nil {
		return nil, fmt.Errorf("restore session %s to %s:%s: nothing written: %w", spec.Key, t.Name, spec.Dir, err)
	}
	p.full = !viaAgent
	p.mayStream = viaAgent && mayStream(t.Compress)
	return p, nil
}

// StartStream starts encoding the chunks as one zstd stream, when the
// restore may stream and To has not run: for a caller that knows the
// link is slow (its setup is taking long) or has --compress zstd. A
// stream To then drops (the link was fast after all) cost the store's
// reads in flight, which a store on S3 may make again.
func (p *RestorePlan) StartStream(ctx context.Context) error {
	if !p.mayStream || p.m == nil || p.early != nil {
		return nil
	}
	var err error
	if p.early, err = startEarlyStream(ctx, p.st, p.m); err != nil {
		return fmt.Errorf("restore session %s: %w", p.spec.Key, err)
	}
	return nil
}

// MayStream reports whether the plan's chunks may travel as one stream.
func (p *RestorePlan) MayStream() bool { return p.mayStream && p.m != nil }

// Close stops the plan's encoding, if any; a plan that ran needs it too.
func (p *RestorePlan) Close() { p.early.close() }

// To runs the plan through r, once.
func (p *RestorePlan) To(ctx context.Context, r transfer.Remote) (RestoreResult, error) {
	st, m, spec := p.st, p.m, p.spec
	key, remoteDir, name := spec.Key, spec.Dir, r.Target().Name
	if m == nil {
		return RestoreResult{Key: key, Missing: true, Seconds: time.Since(p.start).Seconds()}, nil
	}
	// The run takes the plan's stream: a second run encodes its own.
	early := p.early
	p.early = nil
	defer early.close()
	viaAgent := r.Agent() != nil
	if !viaAgent && !p.full {
		// Planned for the agent, which this remote lacks.
		early.close()
		if err := st.Check(ctx, m); err != nil {
			return RestoreResult{}, fmt.Errorf("restore session %s to %s:%s: nothing written: %w", key, name, remoteDir, err)
		}
		p.full = true
	}
	state := "missing"
	statStart := time.Now()
	k, err := r.Stat(ctx, remoteDir, false)
	rtt := time.Since(statStart)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("restore session %s to %s:%s: %w", key, name, remoteDir, err)
	}
	if k != archive.Missing {
		if state, err = probeTarget(ctx, r, remoteDir); err != nil {
			return RestoreResult{}, fmt.Errorf("restore session %s to %s:%s: %w", key, name, remoteDir, err)
		}
	}
	dest, place, swap := remoteDir, archive.PlaceNew, false
	switch state {
	case "missing":
	case "empty":
		place = archive.PlaceInto
	case "full":
		if !spec.Replace {
			return RestoreResult{}, fmt.Errorf("restore session %s to %s:%s: %w (use Replace)", key, name, remoteDir, ErrNotEmpty)
		}
		clean := path.Clean(remoteDir)
		if clean == "." || clean == "/" {
			return RestoreResult{}, fmt.Errorf("restore session %s to %s:%s: will not replace the workspace or the root", key, name, remoteDir)
		}
		dest, swap = path.Join(path.Dir(clean), restorePrefix+archive.RandomTag()), true
	default:
		return RestoreResult{}, fmt.Errorf("restore session %s to %s:%s: %w", key, name, remoteDir, transfer.ErrNotDir)
	}
	var cs transfer.Stats
	if viaAgent {
		stream := streamPays(r.Target().Compress, rtt)
		if !stream && early != nil {
			if l := r.Target().Logger; l != nil {
				l.Debug("restore: the link is fast after all; the chunks go as stored", "sandbox", name, "rtt", rtt)
			}
			early.close()
		}
		cs, err = st.restoreSnapshot(ctx, r, m, dest, place, stream, early)
	} else {
		fill := func(w *archive.Writer) error { return st.writeSnapshot(ctx, m, w, place == archive.PlaceNew) }
		cs, err = r.Upload(ctx, transfer.UploadSpec{Dest: dest, Place: place, Entries: m.Files + m.Dirs + m.Symlinks}, fill)
	}
	if err != nil {
		return RestoreResult{}, fmt.Errorf("restore session %s to %s:%s: %w", key, name, remoteDir, err)
	}
	if swap {
		if err := swapIn(ctx, r.Target(), dest, path.Clean(remoteDir)); err != nil {
			return RestoreResult{}, fmt.Errorf("restore session %s to %s:%s: %w", key, name, remoteDir, err)
		}
	}
	return RestoreResult{
		Key: key, Snapshot: m.Seq, Files: cs.Files, Dirs: cs.Dirs, Symlinks: cs.Symlinks,
		Bytes: cs.Bytes, WireBytes: cs.WireBytes, Seconds: time.Since(p.start).Seconds(), Mode: r.Mode().String(),
	}, nil
}

// snapshotKinds maps a snapshot entry's kind to the archive's.
var snapshotKinds = map[Kind]archive.Kind{
	KindDir:     archive.Dir,
	KindSymlink: archive.Symlink,
	KindFile:    archive.File,
}

// restorePrefix begins the hidden sibling a replacing restore builds.
const restorePrefix = ".ferry-restore-"

// checkSessionPath refuses what cannot be passed as one argument.
func checkSessionPath(p string) error {
	if p == "" || strings.ContainsAny(p, "\x00\n") {
		return fmt.Errorf("restore session: remote path %q: %w", p, archive.ErrUnsafePath)
	}
	return nil
}

// writeSnapshot writes m's tree to w from the store's chunks, each checked
// against its ID as it is read; with root, first a root entry of mode 0700
// for a PlaceNew destination.
func (st *Store) writeSnapshot(ctx context.Context, m *Manifest, w *archive.Writer, root bool) error {
	if root {
		if err := w.WriteEntry(ctx, archive.Header{Name: ".", Kind: archive.Dir, Mode: 0o700, ModTime: m.Time}, nil); err != nil {
			return err
		}
	}
	cr := &chunkReader{ctx: ctx, st: st, buf: make([]byte, MaxChunkSize)}
	for i := range m.Entries {
		e := &m.Entries[i]
		h := archive.Header{Name: e.Path, Mode: e.Mode, ModTime: e.ModTime(), Size: e.Size, Target: e.Target}
		var r io.Reader
		var ok bool
		if h.Kind, ok = snapshotKinds[e.Kind]; !ok {
			return fmt.Errorf("entry %q: unknown kind %q", e.Path, e.Kind)
		}
		if e.Kind == KindFile {
			cr.reset(e.Chunks)
			r = cr
		}
		if err := w.WriteEntry(ctx, h, r); err != nil {
			return err
		}
	}
	return nil
}

// chunkReader reads a file's content from its chunks in the store.
type chunkReader struct {
	ctx    context.Context
	st     *Store
	chunks []ChunkRef
	buf    []byte
	cur    []byte // unread rest of the current chunk
}

func (c *chunkReader) reset(chunks []ChunkRef) { c.chunks, c.cur = chunks, nil }

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.cur) == 0 {
		if len(c.chunks) == 0 {
			return 0, io.EOF
		}
		ref := c.chunks[0]
		data, err := c.st.ReadChunk(c.ctx, ref.ID, c.buf)
		if err != nil {
			return 0, err
		}
		if int64(len(data)) != ref.Size {
			return 0, fmt.Errorf("chunk %s: %d bytes, the manifest says %d", ref.ID, len(data), ref.Size)
		}
		c.chunks, c.cur = c.chunks[1:], data
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// probeScript prints what $1 is for a restore: missing, empty (an empty
// directory), full (a non-empty directory) or other (anything else, a
// symlink included). The globs list hidden names too. Names that start
// with $2 and go on in hex digits (and maybe "." and a pid) are not
// counted: they are the staging directories of the mode the restore runs
// in (archive.StagingPrefix, posix.TempPrefix), which an earlier restore
// into this directory left when it was cut off; the restore removes them
// (when stale) before it stages, so that such a leftover does not make a
// retry refuse the directory as not empty.
const probeScript = `if [ -L "$1" ]; then echo other; elif [ -d "$1" ]; then s=empty; ` +
	`for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do if [ -e "$e" ] || [ -L "$e" ]; then ` +
	`case ${e##*/} in "$2"|"$2".*|"$2"*.|"$2"*[!0-9a-f.]*|"$2"*.*[!0-9]*) s=full; break;; "$2"*) ;; *) s=full; break;; esac; fi; done; echo "$s"; ` +
	`elif [ -e "$1" ]; then echo other; else echo missing; fi`

// probeTarget runs probeScript in the sandbox; r's mode says which
// staging names it passes over.
func probeTarget(ctx context.Context, r transfer.Remote, dir string) (string, error) {
	staging := archive.StagingPrefix
	if r.Mode() == transfer.ModePOSIX {
		staging = posix.TempPrefix
	}
	out, err := transfer.Shell(ctx, r.Target(), probeScript, dir, staging)
	if err != nil {
		return "", fmt.Errorf("probe target: %w", err)
	}
	// A login banner may come first; the answer is the last line.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	switch s := lines[len(lines)-1]; s {
	case "missing", "empty", "full", "other":
		return s, nil
	default:
		return "", fmt.Errorf("probe target: unexpected answer %q", s)
	}
}

// swapScript replaces $2 by $1, keeping $2 as $3 until $1 is in place: if
// the second rename fails, $3 goes back to $2. The old tree may hold
// directories without write permission: chmod lets rm remove them.
const swapScript = `mv -- "$2" "$3" || exit 1; if ! mv -- "$1" "$2"; then mv -- "$3" "$2"; exit 1; fi; chmod -R u+rwx -- "$3" 2>/dev/null; rm -rf -- "$3"`

// swapIn moves the new tree at newDir to dir, whose old content goes.
// On failure it removes newDir, as long as the sandbox can be reached.
func swapIn(ctx context.Context, t transfer.Target, newDir, dir string) error {
	old := path.Join(path.Dir(newDir), restorePrefix+archive.RandomTag())
	if _, err := transfer.Shell(ctx, t, swapScript, newDir, dir, old); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		transfer.Shell(cctx, t, `chmod -R u+rwx -- "$1" 2>/dev/null; rm -rf -- "$1"`, newDir)
		return fmt.Errorf("swap the restored tree into place: %w", err)
	}
	return nil
}

// streamPays says whether a restore's chunks should travel as one zstd
// stream: with --compress zstd always, with auto where the link is slow
// enough that bytes cost more than the host's CPU re-encoding them. The
// round trip of the restore's first call (rtt) tells: a link of
// streamRTT or more is a WAN's (region: 40 ms), where half the bytes is
// most of the time; a LAN's or loopback's is far less, and its bandwidth
// outruns the encoder.
func streamPays(mode frame.Mode, rtt time.Duration) bool {
	switch mode {
	case frame.Zstd:
		return true
	case frame.Auto:
		return rtt >= streamRTT
	}
	return false
}

// mayStream says whether streamPays may be true for mode, before the
// round trip is known.
func mayStream(mode frame.Mode) bool { return mode == frame.Zstd || mode == frame.Auto }

// streamRTT is the round trip from which Auto streams a restore's chunks.
const streamRTT = 10 * time.Millisecond

// restoreSnapshot builds snapshot m at dest through the agent's Restore:
// the store's chunks travel as stored, and the agent decodes and checks
// each against its id before writing it. Compared with streaming the tree
// as tar (POSIX mode), the host neither decompresses nor recompresses
// anything, and the wire carries the store's zstd (unless stream, below). The chunks are read
// from the store prefetchWindow ahead of the stream (see prefetch). A
// chunk the store lacks, or holds over the size bound, fails the restore
// with a *IntegrityError naming it; the agent has then placed
// nothing, as it places the tree only after the whole stream. A chunk the
// agent refuses is looked at again here, so that the error says whether
// the store or the channel damaged it.
//
// With stream, the chunks go as one zstd stream instead (see
// agent.RestoreSpec.Stream): half the bytes, for the host's CPU.
func (st *Store) restoreSnapshot(ctx context.Context, r transfer.Remote, m *Manifest, dest string, place archive.Placement, stream bool, early *earlyStream) (transfer.Stats, error) {
	c := r.Agent()
	spec := agent.RestoreSpec{Dest: dest, Place: place, Stream: stream}
	chunk := func(context.Context, [32]byte, []byte) ([]byte, error) {
		return nil, errors.New("restore: the chunk stream reads the chunks")
	}
	var entries []agent.RestoreEntry
	if stream && early != nil && early.cs != nil {
		spec.Encoded = early.cs
		entries = withRoot(m, place, early.entries)
	} else {
		var err error
		if entries, err = restoreEntries(m); err != nil {
			return transfer.Stats{}, err
		}
		entries = withRoot(m, place, entries)
		pf := startPrefetch(ctx, st, m, entries, prefetchWindow)
		defer pf.close()
		chunk = pf.next
	}
	staging := archive.StagingPrefix + archive.RandomTag()
	spec.Staging = staging
	res, err := c.Restore(ctx, spec, entries, chunk)
	r.Target().LogStale("sandbox", dest, res.StaleStaging, nil)
	if err != nil {
		stagingPath := path.Join(archive.StagingParent(dest, place), staging)
		// A stream the host broke off (a chunk it could not read) is
		// half-closed by Restore, and the agent removes its staging
		// before it answers; only a lost agent leaves one behind, and
		// one that never answered (Restore waits for its hello) none.
		if c.Lost() && !errors.Is(err, agent.ErrUnavailable) {
			transfer.RemoveStaging(ctx, r.Target(), stagingPath)
		}
		var ce *agent.ChunkError
		if errors.As(err, &ce) {
			return transfer.Stats{}, blameChunk(ctx, st, m, ce, err)
		}
		return transfer.Stats{}, err
	}
	return transfer.StatsOf(res), nil
}

// withRoot is entries, with m's root entry first for place PlaceNew. The
// root has no chunks: the chunks, in order, are the same for every place.
func withRoot(m *Manifest, place archive.Placement, entries []agent.RestoreEntry) []agent.RestoreEntry {
	if place != archive.PlaceNew {
		return entries
	}
	root := agent.RestoreEntry{Path: ".", Kind: archive.Dir, Mode: 0o700, MTime: m.Time}
	return append([]agent.RestoreEntry{root}, entries...)
}

// restoreEntries are m's entries as agent.Client.Restore takes them.
func restoreEntries(m *Manifest) ([]agent.RestoreEntry, error) {
	entries := make([]agent.RestoreEntry, 0, len(m.Entries))
	for i := range m.Entries {
		e := &m.Entries[i]
		re := agent.RestoreEntry{Path: e.Path, Mode: e.Mode, MTime: e.ModTime(), Size: e.Size, Target: e.Target}
		kind, ok := snapshotKinds[e.Kind]
		if !ok {
			return nil, fmt.Errorf("entry %q: %w: kind %q", e.Path, archive.ErrUnsupported, e.Kind)
		}
		re.Kind = kind
		if kind == archive.File {
			re.Chunks = make([]agent.ChunkRef, len(e.Chunks))
			for j, c := range e.Chunks {
				re.Chunks[j] = agent.ChunkRef{ID: c.ID, Size: c.Size}
			}
		}
		entries = append(entries, re)
	}
	return entries, nil
}

// earlyStream is a restore's chunk stream, started before the restore
// knows where it goes, and the prefetch that feeds it.
type earlyStream struct {
	entries []agent.RestoreEntry // m's, without a root entry
	pf      *prefetch
	cs      *agent.ChunkStream
}

func startEarlyStream(ctx context.Context, st *Store, m *Manifest) (*earlyStream, error) {
	entries, err := restoreEntries(m)
	if err != nil {
		return nil, err
	}
	pf := startPrefetch(ctx, st, m, entries, prefetchWindow)
	return &earlyStream{entries: entries, pf: pf, cs: agent.StartChunkStream(ctx, entries, pf.next)}, nil
}

// close stops the encoding, then the reads; a second close, or one of
// nil, does nothing.
func (e *earlyStream) close() {
	if e == nil || e.cs == nil {
		return
	}
	e.cs.Close()
	e.pf.close()
	e.cs = nil
}

// blameChunk turns the agent's refusal of a chunk into the store's
// IntegrityError when the store's copy is damaged, and into a digest error
// (the channel, or the agent) when it is intact.
func blameChunk(ctx context.Context, st *Store, m *Manifest, ce *agent.ChunkError, err error) error {
	id := ID(ce.ID)
	_, rerr := st.ReadChunk(ctx, id, nil)
	if errors.Is(rerr, ErrChunkCorrupt) || errors.Is(rerr, ErrChunkMissing) {
		return integrity(m, id, rerr)
	}
	if rerr != nil {
		return errors.Join(err, rerr)
	}
	return fmt.Errorf("%w: the sandbox refused chunk %s of %q, which is intact in the store: %v", archive.ErrDigest, id, ce.Path, err)
}

// prefetchWindow bounds the chunks a restore reads ahead of its stream:
// enough requests in flight to hide a round trip to the store (about a
// millisecond to S3 on loopback, tens across a network) behind the others,
// and at most prefetchWindow+2 buffers of a stored chunk (~130 KiB) held.
const prefetchWindow = 16

// prefetch reads a restore's stored chunks ahead of the stream that sends
// them, in the order agent.Client.Restore asks for them: every chunk
// reference of the entries, in order (a chunk two files share is read
// twice, as Restore sends it twice). The first failed read stops the
// others and is what every later call of next returns. Its goroutines
// have all returned when close does.
type prefetch struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup // the producer and every read
	ids    []ID           // Restore's calls, in order
	due    chan *fetched  // reads started, in order; closed when the producer ends
	free   chan []byte    // buffers Restore has handed back
	n      int            // calls of next so far
	// ra fetches the packs that hold the chunks, a few packs ahead of
	// the reads, from a store that packs.
	ra *ReadAhead
}

// fetched is one read, and its result once done is closed.
type fetched struct {
	done chan struct{}
	data []byte
	err  error
}

// startPrefetch starts reading the chunks of entries, window ahead.
func startPrefetch(ctx context.Context, st *Store, m *Manifest, entries []agent.RestoreEntry, window int) *prefetch {
	ctx, cancel := context.WithCancelCause(ctx)
	p := &prefetch{ctx: ctx, cancel: cancel, due: make(chan *fetched, window), free: make(chan []byte, window+2)}
	for _, e := range entries {
		for _, c := range e.Chunks {
			p.ids = append(p.ids, c.ID)
		}
	}
	p.ra = st.ReadAhead(ctx, p.ids)
	p.wg.Go(func() {
		defer close(p.due)
		for _, id := range p.ids {
			f := &fetched{done: make(chan struct{})}
			// due's capacity is the window: a read starts only once one
			// of the window's results has been taken.
			select {
			case p.due <- f:
			case <-ctx.Done():
				return
			}
			p.wg.Go(func() {
				defer close(f.done)
				var buf []byte
				select {
				case buf = <-p.free:
				default:
				}
				f.data, f.err = p.ra.ReadStored(ctx, id, buf)
				if f.err != nil {
					f.err = integrity(m, id, f.err)
					cancel(f.err)
				}
			})
		}
	})
	return p
}

// integrity turns a read's missing or damaged chunk into the
// *IntegrityError the restore reports, as the store check before
// a POSIX-mode restore does, naming the pack or index object at fault
// when the chunk is in a pack.
func integrity(m *Manifest, id ID, err error) error {
	ie := &IntegrityError{Key: m.Key, Seq: m.Seq}
	switch {
	case errors.Is(err, ErrChunkMissing):
		ie.Missing = []ID{id}
	case errors.Is(err, ErrChunkCorrupt):
		ie.Corrupt = []ID{id}
	default:
		return err
	}
	var pe *PackError
	if errors.As(err, &pe) {
		ie.Packs = []string{pe.Object}
	}
	return ie
}

// next is Restore's agent.StoredChunk: chunk id, which must be the one due.
// buf, the chunk Restore sent last, is reused for a later read.
func (p *prefetch) next(ctx context.Context, id [32]byte, buf []byte) ([]byte, error) {
	if cap(buf) > 0 {
		select {
		case p.free <- buf[:0]:
		default:
		}
	}
	if p.n >= len(p.ids) || p.ids[p.n] != id {
		return nil, fmt.Errorf("prefetch chunk %x: not the one due", id)
	}
	p.n++
	var f *fetched
	select {
	case f = <-p.due:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if f == nil {
		// The producer stopped: a read failed, or the restore's context
		// is done.
		return nil, context.Cause(p.ctx)
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if f.err != nil {
		// The first failure, which may be a later chunk's whose failure
		// cancelled this read: either loses the restore, and that one is
		// the cause.
		return nil, context.Cause(p.ctx)
	}
	return f.data, nil
}

// close stops the reads and waits for them.
func (p *prefetch) close() {
	p.cancel(context.Canceled)
	p.wg.Wait()
	p.ra.Close()
}

// RepairResult is what RepairFrom stored again, in the shape
// `ferry session verify --repair --json` prints under "repair".
type RepairResult struct {
	Wanted   int  `json:"wanted"`   // chunks asked for
	Restored []ID `json:"restored"` // stored again, sorted
	Missing  []ID `json:"missing"`  // not found in the directory, sorted
	// RemovedIndexes are index objects of lost packs that the repair
	// removed (see Store.RepairChunks).
	RemovedIndexes []string `json:"removed_indexes,omitempty"`
	Bytes          int64    `json:"bytes"` // plaintext of the chunks restored
	WireBytes      int64    `json:"wire_bytes"`
	Seconds        float64  `json:"seconds"`
	Mode           string   `json:"mode"`
}

// RepairFrom stores again the chunks missing lists (those Verify
// reports missing) from the directory remoteDir of r's sandbox,
// which still holds the files they were cut from: a session directory
// saved before, or a copy of it. It commits no snapshot, and stores only
// chunks whose content hashes to an id asked for, whatever the sandbox
// sends (see RepairChunks). In agent mode the agent chunks
// the directory next to the data and only the wanted chunks cross the
// relay; POSIX mode downloads the whole directory into a private temp
// directory on this host and chunks it here, as SaveFrom does.
//
// A chunk the directory no longer holds (its file changed or went since
// the save) is reported in the result's Missing, not as an error.
func (st *Store) RepairFrom(ctx context.Context, r transfer.Remote, remoteDir string, missing []ID) (RepairResult, error) {
	start := time.Now()
	missing = sortedIDs(missing)
	res := RepairResult{Wanted: len(missing), Restored: []ID{}, Missing: missing}
	if len(missing) == 0 {
		return res, nil
	}
	name := r.Target().Name
	res.Mode = r.Mode().String()
	if err := sourceDir(ctx, r, remoteDir, "repair session", "repair session from"); err != nil {
		return res, err
	}
	src, wire := sourceFrom(r, remoteDir)
	rep, err := st.RepairChunks(ctx, missing, src)
	res.WireBytes = wire()
	if rep != nil {
		res.Restored, res.Missing = append(res.Restored, rep.Restored...), append([]ID{}, rep.Missing...)
		res.RemovedIndexes, res.Bytes = rep.RemovedIndexes, rep.Bytes
	}
	if err != nil {
		return res, fmt.Errorf("repair session from %s:%s: %w", name, remoteDir, err)
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// sortedIDs returns ids sorted, without duplicates, never nil.
func sortedIDs(ids []ID) []ID {
	out := append([]ID{}, ids...)
	slices.SortFunc(out, CompareIDs)
	return slices.Compact(out)
}
