package ferry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/frame"
	"github.com/ferry-dev/ferry/transfer/posix"
)

// Sandbox is one sandbox reached through an exec channel, and how files
// move to and from it.
type Sandbox struct {
	X    relay.Execer
	Name string
	// Mode chooses agent or POSIX mode; the zero value is ModeAuto.
	Mode Mode
	// Compress is how agent mode compresses data on the wire.
	Compress frame.Mode
	// Agents are the agent builds to install; without them ModeAuto is
	// POSIX mode.
	Agents agent.Bundle
	// IdleTimeout ends an Upload, Download, Pull, SaveSession or
	// RestoreSession (and a Run's transfers) through which next to nothing
	// has moved on the exec channel, in either direction, for this long,
	// with ErrIdle: a sandbox that sends nothing, dribbles, or stops
	// reading cannot hold one forever. A slow but steady stream is
	// progress, and so is a save waiting for a prune of its store. Zero is
	// DefaultIdleTimeout; negative turns it off. Commands (Run's, exec's)
	// are not subject to it: they may be silent for long.
	IdleTimeout time.Duration
	// Logger receives what ferry decides (the mode, an install); nil
	// discards it.
	Logger *slog.Logger
}

// CopyStats is what a copy moved, in the shape `ferry cp --json` prints.
type CopyStats struct {
	Files     int64   `json:"files"`
	Dirs      int64   `json:"dirs"`
	Symlinks  int64   `json:"symlinks"`
	Bytes     int64   `json:"bytes"`
	WireBytes int64   `json:"wire_bytes"`
	Seconds   float64 `json:"seconds"`
	Mode      string  `json:"mode"`
}

var (
	// ErrNoSource means a source named in a copy does not exist.
	ErrNoSource = errors.New("ferry: no such source")
	// ErrNotDir means the destination must be an existing directory (several
	// sources, a trailing slash) and is not.
	ErrNotDir = errors.New("ferry: destination is not a directory")
	// ErrShort means fewer entries arrived than the sender counted.
	ErrShort = transfer.ErrShort
)

// contents reports whether p asks for a directory's contents ("dir/.").
func contents(p string) bool {
	return p == "." || strings.HasSuffix(p, "/.")
}

// Upload copies local sources to dst in the sandbox with `cp -r`
// semantics: a directory into an existing directory lands as
// dst/basename, a directory to a missing path creates it with the
// directory's contents, "src/." copies the contents, a file to a missing
// path is a rename, and several sources need an existing directory.
func Upload(ctx context.Context, sb Sandbox, srcs []string, dst string) (_ CopyStats, err error) {
	start := time.Now()
	if len(srcs) == 0 {
		return CopyStats{}, errors.New("upload: no sources")
	}
	ctx, sb, idle := sb.watchIdle(ctx, fmt.Sprintf("upload to %s:%s", sb.Name, dst))
	defer func() { err = idle.end(err) }()
	r, err := sb.open(ctx)
	if err != nil {
		return CopyStats{}, err
	}
	defer r.close()
	cs, err := upload(ctx, sb, r, srcs, dst)
	if err != nil {
		return CopyStats{}, err
	}
	if err := r.close(); err != nil {
		return CopyStats{}, fmt.Errorf("upload to %s:%s: %w", sb.Name, dst, err)
	}
	cs.Seconds, cs.Mode = time.Since(start).Seconds(), r.mode()
	return cs, nil
}

// upload is Upload through an open remote.
func upload(ctx context.Context, sb Sandbox, r remote, srcs []string, dst string) (CopyStats, error) {
	type source struct {
		path string
		info os.FileInfo
	}
	var sources []source
	for _, s := range srcs {
		fi, err := os.Lstat(s)
		if err != nil {
			return CopyStats{}, fmt.Errorf("upload %s: %w", s, ErrNoSource)
		}
		sources = append(sources, source{s, fi})
	}
	// A destination is followed through a symlink, as cp does.
	kind, err := r.stat(ctx, dst, true)
	if err != nil {
		return CopyStats{}, fmt.Errorf("upload: stat %s:%s: %w", sb.Name, dst, err)
	}
	dstIsDir := kind == transfer.Dir
	if (len(sources) > 1 || strings.HasSuffix(dst, "/")) && !dstIsDir {
		if kind == transfer.Missing && len(sources) == 1 && sources[0].info.IsDir() {
			// "cp -r dir new/" creates new.
		} else {
			return CopyStats{}, fmt.Errorf("upload to %s:%s: %w", sb.Name, dst, ErrNotDir)
		}
	}

	// Decide what the archive holds and where it lands.
	var items []item
	var place transfer.Placement
	remoteDest := dst
	switch {
	case dstIsDir:
		place = transfer.PlaceInto
		for _, s := range sources {
			if s.info.IsDir() && contents(s.path) {
				items = append(items, item{s.path, "."})
			} else {
				items = append(items, item{s.path, filepath.Base(filepath.Clean(s.path))})
			}
		}
	case sources[0].info.IsDir():
		if kind != transfer.Missing {
			return CopyStats{}, fmt.Errorf("upload %s to %s:%s: cannot overwrite a non-directory with a directory", sources[0].path, sb.Name, dst)
		}
		place = transfer.PlaceNew
		items = append(items, item{sources[0].path, "."})
	default:
		// A file (or symlink) to a missing path or over a file: it lands
		// in dst's parent under dst's name, and a missing parent is made.
		remoteDest = path.Dir(strings.TrimSuffix(dst, "/"))
		items = append(items, item{sources[0].path, path.Base(dst)})
		pk, err := r.stat(ctx, remoteDest, true)
		if err != nil {
			return CopyStats{}, fmt.Errorf("upload: stat %s:%s: %w", sb.Name, remoteDest, err)
		}
		switch pk {
		case transfer.Dir:
			place = transfer.PlaceInto
		case transfer.Missing:
			place = transfer.PlaceNew
		default:
			return CopyStats{}, fmt.Errorf("upload to %s:%s: %w", sb.Name, remoteDest, ErrNotDir)
		}
	}

	// The remote side counts what it extracted and must find this many:
	// a stream that a relay ended early between two entries is caught.
	var want int64
	for _, it := range items {
		n, err := countEntries(it.src, it.name)
		if err != nil {
			return CopyStats{}, fmt.Errorf("upload %s: %w", it.src, err)
		}
		want += n
	}
	cs, err := r.upload(ctx, items, remoteDest, place, want)
	if err != nil {
		return CopyStats{}, fmt.Errorf("upload to %s:%s: %w", sb.Name, dst, err)
	}
	return cs, nil
}

// countEntries is how many archive entries Writer.Add(src, name) makes:
// everything under src, without src itself when its contents go to the
// archive root (name ".").
func countEntries(src, name string) (int64, error) {
	var n int64
	err := filepath.WalkDir(src, func(_ string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		return 0, err
	}
	if name == "." || name == "" {
		n--
	}
	return n, nil
}

// Download copies sources in the sandbox to the local dst with the same
// semantics as Upload. Nothing is placed until the whole stream has been
// checked, and only the sources asked for are placed: a stream that
// carries anything else is refused (transfer.ErrUnrequested).
func Download(ctx context.Context, sb Sandbox, srcs []string, dst string, limits transfer.Limits) (_ CopyStats, err error) {
	start := time.Now()
	if len(srcs) == 0 {
		return CopyStats{}, errors.New("download: no sources")
	}
	ctx, sb, idle := sb.watchIdle(ctx, fmt.Sprintf("download %s:%s", sb.Name, strings.Join(srcs, ",")))
	defer func() { err = idle.end(err) }()
	r, err := sb.open(ctx)
	if err != nil {
		return CopyStats{}, err
	}
	defer r.close()
	kinds := make([]transfer.Kind, len(srcs))
	for i, s := range srcs {
		k, err := r.stat(ctx, s, false)
		if err != nil {
			return CopyStats{}, fmt.Errorf("download: stat %s:%s: %w", sb.Name, s, err)
		}
		if k == transfer.Missing {
			return CopyStats{}, fmt.Errorf("download %s:%s: %w", sb.Name, s, ErrNoSource)
		}
		kinds[i] = k
	}
	fi, statErr := os.Stat(dst)
	dstIsDir := statErr == nil && fi.IsDir()
	if (len(srcs) > 1 || strings.HasSuffix(dst, string(os.PathSeparator))) && !dstIsDir {
		if !(statErr != nil && len(srcs) == 1 && kinds[0] == transfer.Dir) {
			return CopyStats{}, fmt.Errorf("download to %s: %w", dst, ErrNotDir)
		}
	}
	var total CopyStats
	add := func(cs CopyStats) {
		total.Files += cs.Files
		total.Dirs += cs.Dirs
		total.Symlinks += cs.Symlinks
		total.Bytes += cs.Bytes
		total.WireBytes += cs.WireBytes
	}
	for i, s := range srcs {
		clean := path.Clean(s)
		var dir string
		var names []string
		var place transfer.Placement
		switch {
		case kinds[i] == transfer.Dir && contents(s):
			dir, names = clean, []string{"."}
			place = transfer.PlaceNew
			if dstIsDir {
				place = transfer.PlaceInto
			}
		case dstIsDir:
			dir, names = path.Dir(clean), []string{path.Base(clean)}
			place = transfer.PlaceInto
		case kinds[i] == transfer.Dir:
			if statErr == nil {
				return CopyStats{}, fmt.Errorf("download %s:%s to %s: cannot overwrite a non-directory with a directory", sb.Name, s, dst)
			}
			dir, names = clean, []string{"."}
			place = transfer.PlaceNew
		default:
			// A file to a missing path or over a file: a rename, the
			// archive's one entry becoming dst.
			dir, names = path.Dir(clean), []string{path.Base(clean)}
			place = transfer.PlaceAs
		}
		cs, err := r.download(ctx, dir, names, dst, place, limits)
		if err != nil {
			return CopyStats{}, fmt.Errorf("download %s:%s: %w", sb.Name, s, err)
		}
		add(cs)
	}
	// "Nothing arrived where something was asked" is ErrShort, against
	// the sandbox's own count; an empty directory is a whole copy.
	if err := r.close(); err != nil {
		return CopyStats{}, fmt.Errorf("download from %s: %w", sb.Name, err)
	}
	total.Seconds = time.Since(start).Seconds()
	total.Mode = r.mode()
	return total, nil
}

// downloadInto is a POSIX-mode download of names in dir to local;
// onStale is told of stale staging directories removed beside local.
func downloadInto(ctx context.Context, r posix.Remote, dir string, names []string, local string, place transfer.Placement, limits transfer.Limits, onStale func(int, error)) (CopyStats, error) {
	pr, pw := io.Pipe()
	done := make(chan download, 1)
	go func() {
		res, err := r.Download(ctx, dir, names, pw)
		pw.CloseWithError(err)
		done <- download{res, err}
	}()
	var d *download
	// finish waits for the download, once.
	finish := func() download {
		if d == nil {
			v := <-done
			d = &v
		}
		return *d
	}
	st, err := transfer.Extract(ctx, pr, local, transfer.ExtractOptions{Limits: limits, Place: place, Names: names, OnStale: onStale, Verify: func(st transfer.Stats) error {
		// tar pads its output to a whole record after the end of the
		// archive; take that, but not an endless stream.
		if n, err := io.Copy(io.Discard, io.LimitReader(pr, maxTrailer+1)); err != nil {
			return finishErr(finish(), err)
		} else if n > maxTrailer {
			return fmt.Errorf("%d bytes or more after the end of the archive", n)
		}
		fin := finish()
		if fin.err != nil {
			return fin.err
		}
		// The sandbox counted the entries before its tar ran: a stream
		// that ended early but cleanly (between two entries, end blocks
		// and all) shows up here. More than counted is a tree that grew.
		if got := st.Files + st.Dirs + st.Symlinks; fin.res.Entries >= 0 && got < fin.res.Entries {
			return fmt.Errorf("%w: the sandbox counted %d entries, %d arrived", ErrShort, fin.res.Entries, got)
		}
		return nil
	}})
	// A refusal closes the pipe, which stops the download.
	pr.CloseWithError(errExtractDone)
	fin := finish()
	if err != nil {
		// The extractor's refusal names the entry: it comes first.
		return CopyStats{}, err
	}
	if fin.err != nil {
		return CopyStats{}, fin.err
	}
	return CopyStats{Files: st.Files, Dirs: st.Dirs, Symlinks: st.Symlinks, Bytes: st.Bytes, WireBytes: fin.res.WireBytes}, nil
}

// download is how a posix.Download ended.
type download struct {
	res posix.Result
	err error
}

// streamBuffer is a little under the exec channel's 256 KiB messages, so
// that one flush is one message.
const streamBuffer = 256<<10 - 128

// finishErr prefers the download's own error (a lost relay, tar's status)
// to the pipe error it caused.
func finishErr(d download, pipeErr error) error {
	if d.err != nil {
		return d.err
	}
	return pipeErr
}

var errExtractDone = errors.New("ferry: extraction finished")

// maxTrailer bounds what may follow a tar stream's end: GNU tar pads to its
// 10 KiB record size, busybox to less.
const maxTrailer = 1 << 20
