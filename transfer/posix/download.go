package posix

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// MaxBanner is how much a login shell may print on stdout before
// Download's stream marker; past it Download gives up.
const MaxBanner = 1 << 20

// Download runs `tar -c` in the sandbox, in directory dir, over names
// (each relative to dir, "." for all of it, passed after --) and copies
// the raw tar stream to w. One exec of sh: it checks that dir and every
// name exist, counts their entries with find, prints a marker fresh per
// call and runs tar. Everything on stdout before the marker (a banner) is
// skipped, at most MaxBanner bytes of it.
//
// A missing dir or name is an *fs.PathError wrapping ErrNotExist that
// names it, before any stream. A tar that exits non-zero is an *ExitError
// carrying tar's stderr. A failure of the channel wraps
// relay.ErrRelayLost. An error from w ends the call and is returned
// wrapped. On any error w may already hold part of a stream.
func (r Remote) Download(ctx context.Context, dir string, names []string, w io.Writer) (Result, error) {
	if dir == "" {
		dir = "."
	}
	rd, err := remotePath("download", dir)
	if err != nil {
		return Result{}, err
	}
	if len(names) == 0 {
		return Result{}, fmt.Errorf("download from %s: no names", dir)
	}
	if w == nil {
		return Result{}, fmt.Errorf("download from %s: nil writer", dir)
	}
	clean := make([]string, len(names))
	for i, n := range names {
		if clean[i], err = memberName("download", n); err != nil {
			return Result{}, err
		}
	}
	tag := newTag()
	ctl := newControl(tag)
	sw := &streamWriter{marker: []byte(tag + " stream\n"), w: w}
	code, err := r.run(ctx, downloadScript, append([]string{tag, rd}, clean...), nil, sw, ctl)
	res := Result{WireBytes: sw.wire + ctl.wire.Load()}
	if sw.err != nil {
		// Our own writer stopped the call; that is the cause.
		return res, fmt.Errorf("download from %s: %w", dir, sw.err)
	}
	if err != nil {
		return res, fmt.Errorf("download from %s: %w", dir, err)
	}
	if v, ok := ctl.msg("fail"); ok {
		reason, which, _ := strings.Cut(v, " ")
		p := dir
		if i, err := strconv.Atoi(which); err == nil && i >= 0 && i < len(names) {
			p = path.Join(dir, names[i])
		}
		switch reason {
		case "missing":
			return res, &fs.PathError{Op: "download", Path: p, Err: ErrNotExist}
		case "notdir":
			return res, &fs.PathError{Op: "download", Path: p, Err: ErrNotDir}
		}
		return res, fmt.Errorf("download from %s: %w", dir, &ExitError{Op: "cd", Code: code, Stderr: ctl.stderr()})
	}
	v, ok := ctl.msg("tar")
	if !ok {
		return res, fmt.Errorf("download from %s: %w", dir, &ExitError{Op: "sh", Code: code, Stderr: ctl.stderr()})
	}
	if st, err := strconv.Atoi(v); err != nil || st != 0 || code != 0 {
		if err == nil && st != 0 {
			code = st
		}
		return res, fmt.Errorf("download from %s: %w", dir, &ExitError{Op: "tar -c", Code: code, Stderr: ctl.stderr()})
	}
	if !sw.found {
		return res, fmt.Errorf("download from %s: tar succeeded but no stream marker arrived", dir)
	}
	res.Entries = -1
	if v, ok := ctl.msg("count"); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			res.Entries = n
		}
	}
	return res, nil
}

// errNoMarker means the banner outgrew MaxBanner.
var errNoMarker = errors.New("no stream marker within the first 1 MiB of output")

// streamWriter skips stdout up to and including the marker and copies the
// rest to w. It keeps a sticky error, and is written from one goroutine.
type streamWriter struct {
	marker  []byte
	w       io.Writer
	pending []byte // the tail of the banner that may begin a marker
	skipped int64
	found   bool
	wire    int64
	err     error
}

func (s *streamWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	s.wire += int64(len(p))
	if s.found {
		if _, err := s.w.Write(p); err != nil {
			s.err = fmt.Errorf("write stream: %w", err)
			return 0, s.err
		}
		return len(p), nil
	}
	buf := append(s.pending[:len(s.pending):len(s.pending)], p...)
	i := bytes.Index(buf, s.marker)
	if i < 0 {
		keep := min(len(buf), len(s.marker)-1)
		s.skipped += int64(len(buf) - keep)
		if s.skipped > MaxBanner {
			s.err = errNoMarker
			return 0, s.err
		}
		s.pending = append(s.pending[:0], buf[len(buf)-keep:]...)
		return len(p), nil
	}
	s.skipped += int64(i)
	if s.skipped > MaxBanner {
		s.err = errNoMarker
		return 0, s.err
	}
	s.found, s.pending = true, nil
	if rest := buf[i+len(s.marker):]; len(rest) > 0 {
		if _, err := s.w.Write(rest); err != nil {
			s.err = fmt.Errorf("write stream: %w", err)
			return 0, s.err
		}
	}
	return len(p), nil
}
