package transfer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/posix"
)

// posixRemote is POSIX mode.
type posixRemote struct {
	r posix.Remote
	t Target
}

func (p posixRemote) Target() Target       { return p.t }
func (p posixRemote) Mode() Mode           { return ModePOSIX }
func (p posixRemote) Agent() *agent.Client { return nil }
func (p posixRemote) Close() error         { return nil }

func (p posixRemote) Stat(ctx context.Context, path string, follow bool) (archive.Kind, error) {
	if follow {
		return p.r.StatFollow(ctx, path)
	}
	return p.r.Stat(ctx, path)
}

func (p posixRemote) Upload(ctx context.Context, spec UploadSpec, fill Fill) (Stats, error) {
	if spec.Count != nil {
		// The sandbox's script is given the count before the stream.
		n, err := spec.Count(ctx)
		if err != nil {
			return Stats{}, err
		}
		spec.Entries = n
	}
	pr, pw := io.Pipe()
	// The tar writer makes several small writes per entry; unbuffered,
	// each became one exec-stream message (70,000 for 10,000 small files).
	bw := bufio.NewWriterSize(pw, streamBuffer)
	w := archive.NewWriter(bw)
	werr := make(chan error, 1)
	go func() {
		err := fill(w)
		if err == nil {
			err = w.Close()
		}
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
		werr <- err
	}()
	res, err := p.r.Upload(ctx, pr, spec.Dest, posix.Placement(spec.Place), spec.Entries)
	pr.CloseWithError(io.ErrClosedPipe)
	p.t.LogStale("sandbox", spec.Dest, res.Swept, nil)
	if wErr := <-werr; wErr != nil && err == nil {
		err = wErr
	}
	if err != nil {
		return Stats{}, err
	}
	st := w.Stats()
	return Stats{Files: st.Files, Dirs: st.Dirs, Symlinks: st.Symlinks, Bytes: st.Bytes, WireBytes: res.WireBytes}, nil
}

// Download runs the sandbox's tar and extracts its stream on the host,
// where every entry is checked.
func (p posixRemote) Download(ctx context.Context, spec DownloadSpec) (Stats, error) {
	if spec.FilesOnly {
		// The sandbox's tar has no such option: which names are files is
		// asked first, in one exec.
		present, err := p.Present(ctx, spec.Dir, spec.Names)
		if err != nil || len(present) == 0 {
			return Stats{}, err
		}
		spec.Names, spec.FilesOnly = present, false
	}
	onStale := func(n int, err error) { p.t.LogStale("host", spec.Local, n, err) }
	pr, pw := io.Pipe()
	done := make(chan download, 1)
	go func() {
		res, err := p.r.Download(ctx, spec.Dir, spec.Names, pw)
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
	st, err := archive.Extract(ctx, pr, spec.Local, archive.ExtractOptions{Limits: spec.Limits, Place: spec.Place, Names: spec.Names, OnStale: onStale, Verify: func(st archive.Stats) error {
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
		return Stats{}, err
	}
	if fin.err != nil {
		return Stats{}, fin.err
	}
	return Stats{Files: st.Files, Dirs: st.Dirs, Symlinks: st.Symlinks, Bytes: st.Bytes, WireBytes: fin.res.WireBytes}, nil
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

// Present lists which of names are regular files in dir, with one exec.
// The names are the caller's, passed as arguments.
func (p posixRemote) Present(ctx context.Context, dir string, names []string) ([]string, error) {
	const script = `cd -- "$1" 2>/dev/null || exit 0; shift; for f; do if [ -f "$f" ] && [ ! -L "$f" ]; then printf '%s\n' "$f"; fi; done`
	var out, errb bytes.Buffer
	code, err := p.t.X.Exec(ctx, &relay.Command{
		Sandbox: p.t.Name,
		Argv:    append([]string{"sh", "-c", script, "sh", dir}, names...),
		Stdout:  &limitedBuffer{buf: &out, max: 64 << 10},
		Stderr:  &limitedBuffer{buf: &errb, max: 4 << 10},
	})
	if err != nil {
		return nil, fmt.Errorf("list %s:%s: %w", p.t.Name, dir, err)
	}
	if code != 0 {
		return nil, fmt.Errorf("list %s:%s: %w", p.t.Name, dir, &ExitError{Op: "sh", Code: code, Stderr: strings.TrimSpace(errb.String())})
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var present []string
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		// A login banner may precede the list; only known names count.
		if line := sc.Text(); want[line] {
			present = append(present, line)
			delete(want, line)
		}
	}
	return present, nil
}

// limitedBuffer keeps at most max bytes and drops the rest.
type limitedBuffer struct {
	buf *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
