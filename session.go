package ferry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/posix"
)

// SessionSaveResult is what SaveSession stored, in the shape `ferry
// session save --json` prints.
type SessionSaveResult struct {
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

// SaveSession stores the directory remoteDir of the sandbox as the next
// snapshot of key in st. The commit is st.Save's: of two saves of one key
// that race, one commits and the other fails with an error matching
// session.ErrConflict that names the key, having committed nothing.
//
// In agent mode the agent chunks and hashes the directory next to the
// data and only chunks the store lacks cross the relay; files whose size
// and mtime match the last snapshot are not read. POSIX mode downloads the
// whole directory into a private temp directory on this host (0700,
// removed afterwards) and chunks it here; the store still dedups. Both
// modes refuse what a restore would refuse, naming the entry: a symlink
// that resolves outside the directory (archive.ErrLinkEscape: by the
// download's extractor in POSIX mode, by Store.Save in agent mode), a
// tree over the restore's limits (archive.ErrLimit).
//
// A save that returns no error committed its snapshot, even when the
// channel failed after the commit: that failure is in the result's
// RelayLost, not an error. An error means nothing was committed (a
// commit's own result is the store's: once Store.Save has returned the
// manifest, the snapshot is in the store).
func SaveSession(ctx context.Context, sb Sandbox, st *session.Store, remoteDir, key string) (_ SessionSaveResult, err error) {
	start := time.Now()
	if st == nil {
		return SessionSaveResult{}, errors.New("save session: nil store")
	}
	if err := session.ValidKey(key); err != nil {
		return SessionSaveResult{}, err
	}
	ctx, sb, idle := sb.watchIdle(ctx, fmt.Sprintf("save session %s:%s", sb.Name, remoteDir))
	defer func() { err = idle.end(err) }()
	// Waiting for a prune of the store is the host waiting, not the
	// sandbox.
	ctx = idle.withHold(ctx)
	r, err := sb.open(ctx)
	if err != nil {
		return SessionSaveResult{}, err
	}
	defer r.Close()
	res, err := saveSession(ctx, sb, r, st, remoteDir, key)
	if err != nil {
		return res, err
	}
	if err := r.Close(); err != nil {
		// The snapshot is committed and complete: the channel failed
		// after. Failing the save would send a caller to retry it.
		res.RelayLost = err.Error()
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// saveSession is SaveSession through an open remote.
func saveSession(ctx context.Context, sb Sandbox, r transfer.Remote, st *session.Store, remoteDir, key string) (SessionSaveResult, error) {
	start := time.Now()
	kind, err := r.Stat(ctx, remoteDir, true)
	if err != nil {
		return SessionSaveResult{}, fmt.Errorf("save session: stat %s:%s: %w", sb.Name, remoteDir, err)
	}
	switch kind {
	case archive.Dir:
	case archive.Missing:
		return SessionSaveResult{}, fmt.Errorf("save session %s:%s: %w", sb.Name, remoteDir, ErrNoSource)
	default:
		return SessionSaveResult{}, fmt.Errorf("save session %s:%s: %w", sb.Name, remoteDir, ErrNotDir)
	}
	src, wire := sessionSource(sb, r, remoteDir)
	m, err := st.Save(ctx, key, src)
	if err != nil {
		return SessionSaveResult{}, fmt.Errorf("save session %s:%s: %w", sb.Name, remoteDir, err)
	}
	return SessionSaveResult{
		Key: key, Snapshot: m.Seq, Files: m.Files, Bytes: m.Bytes,
		NewBytes: m.NewBytes, NewChunks: m.NewChunks, WireBytes: wire(),
		Seconds: time.Since(start).Seconds(), Mode: r.Mode().String(),
	}, nil
}

// sessionSource is the session.Source a save reads the directory dir of
// the sandbox from, through r, and a function that reports the bytes it
// moved through the channel once the save is over. It is the one place
// where a mode chooses how a session leaves the sandbox: the agent chunks
// and hashes next to the data; POSIX mode downloads the whole directory
// and chunks it on the host (the store still dedups).
func sessionSource(sb Sandbox, r transfer.Remote, dir string) (session.Source, func() int64) {
	if c := r.Agent(); c != nil {
		// Chunked and hashed next to the data; only what the store lacks
		// crosses the relay, and files unchanged since the last snapshot
		// are not read at all.
		src := &session.AgentSource{Client: c, Dir: dir, ReuseUnchanged: true, Compress: sb.Compress}
		return src, func() int64 { return src.WireBytes }
	}
	d := &downloadSource{r: r, dir: dir}
	return d, d.wire.Load
}

// downloadSource is a session.Source that downloads the sandbox's
// directory whole into a private temp directory on this host and scans
// that as a session.DirSource. The store still dedups: only chunks it
// lacks are written.
type downloadSource struct {
	r    transfer.Remote
	dir  string
	wire atomic.Int64
}

var _ session.Source = (*downloadSource)(nil)

// Scan implements session.Source. The temp directory is 0700 (a session
// may hold credentials, such as codex's auth.json) and is removed before
// Scan returns.
func (d *downloadSource) Scan(ctx context.Context, prev *session.Parent, sink session.Sink) error {
	tmp, err := os.MkdirTemp("", "ferry-session-*")
	if err != nil {
		return fmt.Errorf("download %s: %w", d.dir, err)
	}
	defer removeTree(tmp)
	local := filepath.Join(tmp, "tree")
	cs, err := d.r.Download(ctx, d.dir, []string{"."}, local, archive.PlaceNew, archive.Limits{})
	d.wire.Add(cs.WireBytes)
	if err != nil {
		return fmt.Errorf("download %s: %w", d.dir, err)
	}
	// Every file was just written here, so reusing chunk lists by size
	// and mtime would save no wire bytes, only local reads.
	return session.DirSource{Dir: local}.Scan(ctx, prev, sink)
}

// removeTree removes a temp directory, making read-only directories in it
// writable first (a session may hold some).
func removeTree(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err == nil && de.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	os.RemoveAll(dir)
}

// SessionRestoreOptions shape a RestoreSession.
type SessionRestoreOptions struct {
	// Seq is the snapshot to restore; 0 is the newest.
	Seq int64
	// Replace allows a non-empty target, whose content is replaced whole.
	Replace bool
	// AllowMissing makes a key without any snapshot (a task's first run)
	// a successful restore of nothing, reported in the result's Missing.
	AllowMissing bool
}

// SessionRestoreResult is what RestoreSession placed, in the shape `ferry
// session restore --json` prints.
type SessionRestoreResult struct {
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

// RestoreSession writes snapshot opts.Seq (the newest if 0) of key into
// the directory remoteDir of the sandbox, with its modes, nanosecond
// mtimes, symlinks and empty directories. A chunk the snapshot needs that
// is missing from the store fails the restore before the sandbox is
// touched, with a *session.IntegrityError. In agent mode the chunks travel
// as stored (compressed) and the agent checks each one's content against
// its id before writing any of it; in POSIX mode the host reads and checks
// them all first, then streams the tree as tar. Either way a corrupt chunk
// fails the restore with a *session.IntegrityError naming it, and the tree
// is placed only once the sandbox has checked the whole of it: nothing is
// written to remoteDir.
//
// A missing remoteDir is created (0700, with its parents); an empty one
// receives the tree, and so does one that holds nothing but the staging
// directory a cut restore into it left (which goes). A non-empty one is
// refused with an error matching session.ErrNotEmpty unless
// opts.Replace; then the tree is placed as a
// hidden new sibling of remoteDir and swapped in by one exec of sh: the
// old directory is renamed aside, the new one renamed to remoteDir (the
// old one is renamed back if that fails), and the old one removed. A
// channel cut between the two renames leaves both under hidden names
// beside remoteDir (".ferry-restore-*"), never neither. A key without
// snapshots matches session.ErrNoSnapshot unless opts.AllowMissing.
//
// Limitations: the target probe and the swap are execs of the sandbox's
// sh in both modes (no agent RPC for them yet), and their few bytes are
// not counted in WireBytes. In agent mode a symlink that resolves outside
// the restored tree is refused, as the agent's extractor refuses it; POSIX
// mode writes it as saved.
func RestoreSession(ctx context.Context, sb Sandbox, st *session.Store, key, remoteDir string, opts SessionRestoreOptions) (_ SessionRestoreResult, err error) {
	start := time.Now()
	if st == nil {
		return SessionRestoreResult{}, errors.New("restore session: nil store")
	}
	ctx, sb, idle := sb.watchIdle(ctx, fmt.Sprintf("restore session %s to %s:%s", key, sb.Name, remoteDir))
	defer func() { err = idle.end(err) }()
	r, err := sb.open(ctx)
	if err != nil {
		return SessionRestoreResult{}, err
	}
	defer r.Close()
	res, err := restoreSession(ctx, sb, r, st, key, remoteDir, opts)
	if err != nil {
		return res, err
	}
	if err := r.Close(); err != nil {
		return SessionRestoreResult{}, fmt.Errorf("restore session %s to %s:%s: %w", key, sb.Name, remoteDir, err)
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// restoreSession is RestoreSession through an open remote. A target the
// remote reports missing (a fresh sandbox, the usual case) costs no exec
// beyond r's; an existing one is probed, and a replaced one swapped, by
// the sandbox's sh.
func restoreSession(ctx context.Context, sb Sandbox, r transfer.Remote, st *session.Store, key, remoteDir string, opts SessionRestoreOptions) (SessionRestoreResult, error) {
	start := time.Now()
	if err := checkSessionPath(remoteDir); err != nil {
		return SessionRestoreResult{}, err
	}
	m, err := st.Load(ctx, key, opts.Seq)
	if errors.Is(err, session.ErrNoSnapshot) && opts.AllowMissing && opts.Seq == 0 {
		return SessionRestoreResult{Key: key, Missing: true, Seconds: time.Since(start).Seconds()}, nil
	}
	if err != nil {
		return SessionRestoreResult{}, fmt.Errorf("restore session %s: %w", key, err)
	}
	viaAgent := r.Agent() != nil
	// The agent checks every chunk's content before writing it; POSIX
	// mode's tar cannot, so the host reads and checks them all first.
	check := st.Check
	if viaAgent {
		check = st.CheckPresent
	}
	if err := check(ctx, m); err != nil {
		return SessionRestoreResult{}, fmt.Errorf("restore session %s to %s:%s: nothing written: %w", key, sb.Name, remoteDir, err)
	}
	state := "missing"
	if k, err := r.Stat(ctx, remoteDir, false); err != nil {
		return SessionRestoreResult{}, fmt.Errorf("restore session %s to %s:%s: %w", key, sb.Name, remoteDir, err)
	} else if k != archive.Missing {
		if state, err = probeTarget(ctx, sb, r, remoteDir); err != nil {
			return SessionRestoreResult{}, fmt.Errorf("restore session %s to %s:%s: %w", key, sb.Name, remoteDir, err)
		}
	}
	dest, place, swap := remoteDir, archive.PlaceNew, false
	switch state {
	case "missing":
	case "empty":
		place = archive.PlaceInto
	case "full":
		if !opts.Replace {
			return SessionRestoreResult{}, fmt.Errorf("restore session %s to %s:%s: %w (use Replace)", key, sb.Name, remoteDir, session.ErrNotEmpty)
		}
		clean := path.Clean(remoteDir)
		if clean == "." || clean == "/" {
			return SessionRestoreResult{}, fmt.Errorf("restore session %s to %s:%s: will not replace the workspace or the root", key, sb.Name, remoteDir)
		}
		dest, swap = path.Join(path.Dir(clean), restorePrefix+archive.RandomTag()), true
	default:
		return SessionRestoreResult{}, fmt.Errorf("restore session %s to %s:%s: %w", key, sb.Name, remoteDir, ErrNotDir)
	}
	var cs CopyStats
	if viaAgent {
		cs, err = restoreSnapshot(ctx, sb, r.Agent(), st, m, dest, place)
	} else {
		fill := func(w *archive.Writer) error { return writeSnapshot(ctx, st, m, w, place == archive.PlaceNew) }
		cs, err = r.Upload(ctx, fill, dest, place, m.Files+m.Dirs+m.Symlinks)
	}
	if err != nil {
		return SessionRestoreResult{}, fmt.Errorf("restore session %s to %s:%s: %w", key, sb.Name, remoteDir, err)
	}
	if swap {
		if err := swapIn(ctx, sb, dest, path.Clean(remoteDir)); err != nil {
			return SessionRestoreResult{}, fmt.Errorf("restore session %s to %s:%s: %w", key, sb.Name, remoteDir, err)
		}
	}
	return SessionRestoreResult{
		Key: key, Snapshot: m.Seq, Files: cs.Files, Dirs: cs.Dirs, Symlinks: cs.Symlinks,
		Bytes: cs.Bytes, WireBytes: cs.WireBytes, Seconds: time.Since(start).Seconds(), Mode: r.Mode().String(),
	}, nil
}

// snapshotKinds maps a snapshot entry's kind to the archive's.
var snapshotKinds = map[session.Kind]archive.Kind{
	session.KindDir:     archive.Dir,
	session.KindSymlink: archive.Symlink,
	session.KindFile:    archive.File,
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
func writeSnapshot(ctx context.Context, st *session.Store, m *session.Manifest, w *archive.Writer, root bool) error {
	if root {
		if err := w.WriteEntry(ctx, archive.Header{Name: ".", Kind: archive.Dir, Mode: 0o700, ModTime: m.Time}, nil); err != nil {
			return err
		}
	}
	cr := &chunkReader{ctx: ctx, st: st, buf: make([]byte, session.MaxChunkSize)}
	for i := range m.Entries {
		e := &m.Entries[i]
		h := archive.Header{Name: e.Path, Mode: e.Mode, ModTime: e.ModTime(), Size: e.Size, Target: e.Target}
		var r io.Reader
		var ok bool
		if h.Kind, ok = snapshotKinds[e.Kind]; !ok {
			return fmt.Errorf("entry %q: unknown kind %q", e.Path, e.Kind)
		}
		if e.Kind == session.KindFile {
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
	st     *session.Store
	chunks []session.ChunkRef
	buf    []byte
	cur    []byte // unread rest of the current chunk
}

func (c *chunkReader) reset(chunks []session.ChunkRef) { c.chunks, c.cur = chunks, nil }

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
func probeTarget(ctx context.Context, sb Sandbox, r transfer.Remote, dir string) (string, error) {
	staging := archive.StagingPrefix
	if r.Mode() == transfer.ModePOSIX {
		staging = posix.TempPrefix
	}
	out, err := shOut(ctx, sb, probeScript, dir, staging)
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
func swapIn(ctx context.Context, sb Sandbox, newDir, dir string) error {
	old := path.Join(path.Dir(newDir), restorePrefix+archive.RandomTag())
	if _, err := shOut(ctx, sb, swapScript, newDir, dir, old); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		shOut(cctx, sb, `chmod -R u+rwx -- "$1" 2>/dev/null; rm -rf -- "$1"`, newDir)
		return fmt.Errorf("swap the restored tree into place: %w", err)
	}
	return nil
}

// shOut runs script with args in the sandbox's sh and returns its stdout
// (at most 64 KiB); a non-zero exit is an error with its stderr.
func shOut(ctx context.Context, sb Sandbox, script string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	code, err := sb.X.Exec(ctx, &relay.Command{
		Sandbox: sb.Name,
		Argv:    append([]string{"sh", "-c", script, "sh"}, args...),
		Stdout:  &limitedBuffer{buf: &out, max: 64 << 10},
		Stderr:  &limitedBuffer{buf: &errb, max: 4 << 10},
	})
	if err != nil {
		return "", err
	}
	if code != 0 {
		return "", fmt.Errorf("sh: exit %d: %s", code, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}
