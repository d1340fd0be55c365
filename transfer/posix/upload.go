package posix

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// Placement is archive.Placement: the sandbox places an uploaded tree as
// Extract places a downloaded one. Here, unlike there, PlaceNew and PlaceAs
// make missing parent directories; PlaceInto also takes a symlink to a
// directory, and its temp dir lives inside dest, so dest's own mtime
// changes even when an upload fails; PlaceAs removes a symlink at dest
// before the rename, as mv would follow one to a directory.
type Placement = archive.Placement

// The placements, as in package archive.
const (
	PlaceNew  = archive.PlaceNew
	PlaceInto = archive.PlaceInto
	PlaceAs   = archive.PlaceAs
)

// placeWords are the placements as upload.sh names them.
var placeWords = map[Placement]string{PlaceNew: "new", PlaceInto: "into", PlaceAs: "as"}

// Result is what a transfer moved.
type Result struct {
	// Entries is, for Upload, the number of paths the sandbox found below
	// the extracted root (an archive's "." entry is not one); for
	// Download, the number of entries below and including each name but
	// "." itself, counted just before tar ran. Either way it is what
	// archive.Stats counts as Files + Dirs + Symlinks for the same tree,
	// unless the tree changed meanwhile. -1 when a Download's sandbox
	// reported no count.
	Entries int64
	// WireBytes is what crossed the channel: stdin sent plus stdout and
	// stderr received, a login shell's banner included.
	WireBytes int64
	// Swept is, for Upload, how many temp dirs of earlier uploads whose
	// script is gone (killed, or cut off with its relay) the sandbox
	// removed beside dest before it made its own.
	Swept int
}

// TempPrefix begins the names of Upload's temp dirs (hex digits follow);
// upload.sh's sweep of
// dead ones matches it.
const TempPrefix = ".ferry-up-"

// cleanupTimeout bounds the exec that removes a temp dir after a failure
// the upload script could not clean up after itself.
const cleanupTimeout = 15 * time.Second

// Upload streams archive, a tar stream, into the sandbox and places it at
// dest. One exec of sh: for PlaceNew and PlaceAs it makes dest's parent
// (mkdir -p); it extracts with the sandbox's tar (`tar -x -p -o`:
// permissions kept, owners never restored) into a fresh hidden temp dir
// beside dest (inside it for PlaceInto), counts the entries with find, and
// only if tar exited 0 and the count equals wantEntries (-1 skips the
// check) moves the tree into place. On any failure the temp dir is removed
// and dest is left as it was (but see the package's limitations for
// PlaceInto and cuts).
//
// wantEntries counts every path below the archive's root, as find sees
// them after extraction: for an archive made by archive.Writer, Files +
// Dirs + Symlinks of its Stats. Pass it whenever it is known: it is what
// catches an archive that stops cleanly between two entries.
//
// archive must end with tar's two zero blocks, else Upload fails with
// ErrTruncated without the sandbox seeing EOF. A failure of the channel
// wraps relay.ErrRelayLost; a failed tar is an *ExitError with tar's
// stderr; PlaceNew or PlaceAs onto something in the way is ErrExist,
// PlaceInto onto a missing path ErrNotExist, onto a non-directory
// ErrNotDir, each in an *fs.PathError naming dest.
//
// When the script could not clean up after itself (the relay broke, ctx
// ended, archive failed), Upload removes the temp dir with a second exec
// that runs even if ctx is done, bounded by 15s; it waits for the first
// script to be gone, which costs up to half a second when that script
// never started, or its word that it had did not reach the host.
//
// As relay.Execer allows, Upload may return before archive is read to EOF
// (the sandbox refused early) and a Read in progress then may still return
// after Upload has: close a pipe feeding archive once Upload returns.
func (r Remote) Upload(ctx context.Context, archive io.Reader, dest string, place Placement, wantEntries int64) (Result, error) {
	rd, err := remotePath("upload", dest)
	if err != nil {
		return Result{}, err
	}
	word, ok := placeWords[place]
	if !ok {
		return Result{}, fmt.Errorf("upload to %s: unknown placement %d", dest, int(place))
	}
	if wantEntries < -1 {
		return Result{}, fmt.Errorf("upload to %s: wantEntries %d: use -1 to skip the check", dest, wantEntries)
	}
	if archive == nil {
		return Result{}, fmt.Errorf("upload to %s: nil archive", dest)
	}
	tag := newTag()
	parent := rd
	if place != PlaceInto {
		parent = path.Dir(rd)
	}
	// Hidden, unguessable, and named by the host, so that the host can
	// remove it after a kill; mkdir in the script makes it exclusively.
	tmp := path.Join(parent, TempPrefix+strings.TrimPrefix(tag, "ferry-"))
	if !path.IsAbs(tmp) {
		tmp = "./" + tmp
	}
	ctl := newControl(tag)
	out := &counter{}
	in := &endCheck{r: archive}
	code, err := r.run(ctx, uploadScript,
		[]string{tag, word, rd, parent, tmp, strconv.FormatInt(wantEntries, 10)},
		in, out, ctl)
	res := Result{WireBytes: in.n.Load() + out.n.Load() + ctl.wire.Load()}
	_, started := ctl.msg("started")
	if v, ok := ctl.msg("swept"); ok {
		if n, perr := strconv.Atoi(v); perr == nil && n > 0 {
			res.Swept = n
		}
	}
	if err != nil {
		return res, r.cleanup(ctx, tmp, started, fmt.Errorf("upload to %s: %w", dest, err))
	}
	if v, ok := ctl.msg("ok"); ok && code == 0 {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil {
			return res, fmt.Errorf("upload to %s: bad entry count %q from the sandbox", dest, v)
		}
		res.Entries = n
		return res, nil
	}
	v, ok := ctl.msg("fail")
	if !ok {
		// The script did not get to say why: killed, or no sh.
		return res, r.cleanup(ctx, tmp, started, fmt.Errorf("upload to %s: %w", dest, &ExitError{Op: "sh", Code: code, Stderr: ctl.stderr()}))
	}
	return res, uploadFailure(dest, v, wantEntries, ctl.stderr())
}

// uploadFailure turns "REASON STATUS [DETAIL]" into an error.
func uploadFailure(dest, msg string, want int64, stderr string) error {
	f := strings.SplitN(msg, " ", 3)
	reason := f[0]
	status := 0
	if len(f) > 1 {
		status, _ = strconv.Atoi(f[1])
	}
	detail := ""
	if len(f) > 2 {
		detail = f[2]
	}
	switch reason {
	case "exists":
		return &fs.PathError{Op: "upload", Path: dest, Err: ErrExist}
	case "missing":
		return &fs.PathError{Op: "upload", Path: dest, Err: ErrNotExist}
	case "notdir":
		return &fs.PathError{Op: "upload", Path: dest, Err: ErrNotDir}
	case "conflict":
		return &fs.PathError{Op: "upload", Path: path.Join(dest, detail),
			Err: fmt.Errorf("%w: a directory and a non-directory meet", ErrExist)}
	case "single":
		return fmt.Errorf("upload to %s: PlaceAs needs an archive of exactly one top-level entry, this one has %s", dest, detail)
	case "count":
		return fmt.Errorf("upload to %s: %w: the sandbox extracted %s entries, want %d", dest, ErrEntryCount, detail, want)
	case "tar":
		return fmt.Errorf("upload to %s: %w", dest, &ExitError{Op: "tar -x", Code: status, Stderr: stderr})
	case "mkdir", "tmp":
		return fmt.Errorf("upload to %s: %w", dest, &ExitError{Op: "mkdir", Code: status, Stderr: stderr})
	case "move":
		return fmt.Errorf("upload to %s: %w", dest, &ExitError{Op: "mv", Code: status, Stderr: stderr})
	}
	return fmt.Errorf("upload to %s: sandbox script failed: %s: %s", dest, msg, stderr)
}

// cleanup removes tmp with a second exec, when the upload's script may
// have died before it could (a cut relay, a kill); it runs even if ctx is
// done. started says the upload's script said it had started: then a
// temp dir that is not there was removed by the script, and the cleanup
// does not wait for it to appear (a sandbox that says so falsely only
// leaves its own temp dir to the next upload's sweep). Its own failure is
// added to err's message; err stays what errors.Is sees.
func (r Remote) cleanup(ctx context.Context, tmp string, started bool, err error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	args := []string{tmp}
	if started {
		args = append(args, "started")
	}
	ctl := newControl(newTag())
	code, cerr := r.run(cctx, cleanupScript, args, nil, nil, ctl)
	if cerr == nil && code != 0 {
		cerr = &ExitError{Op: "rm", Code: code, Stderr: ctl.stderr()}
	}
	if cerr != nil {
		return fmt.Errorf("%w (and temp dir %s may remain: %v)", err, tmp, cerr)
	}
	return err
}

// endCheck passes a tar stream through, counting it, and turns an EOF
// that does not follow tar's end-of-archive blocks into ErrTruncated: a
// failing stdin makes the relay kill the process, where EOF would let tar
// finish on what it had.
type endCheck struct {
	r     io.Reader
	n     atomic.Int64
	zeros int64 // trailing zero bytes so far
	err   error
}

func (e *endCheck) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.r.Read(p)
	if n > 0 {
		e.n.Add(int64(n))
		i := n - 1
		for i >= 0 && p[i] == 0 {
			i--
		}
		if i < 0 {
			e.zeros += int64(n)
		} else {
			e.zeros = int64(n - 1 - i)
		}
	}
	if errors.Is(err, io.EOF) {
		if total := e.n.Load(); total%512 != 0 || e.zeros < 1024 {
			e.err = fmt.Errorf("%w (%d bytes, ending in %d zero bytes)", ErrTruncated, total, e.zeros)
			return n, e.err
		}
	}
	if err != nil {
		e.err = err
	}
	return n, err
}
