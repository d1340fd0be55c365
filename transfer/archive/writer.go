package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Writer streams a tar archive of local trees in PAX format: nanosecond
// mtimes, names and link targets of any length and in any script. Entries
// carry uid and gid 0 and no user or group names: what is uploaded belongs
// to whoever extracts it. The output extracts with GNU tar, busybox tar and
// Extract; NewWriterFormat's FormatEntries output, with Extract only.
//
// Writer does not buffer: headers reach the underlying writer 512 bytes at
// a time and file data in 256 KiB pieces; wrap it in a bufio.Writer where
// small writes cost. Writer is not safe for concurrent use. After the first
// error every method returns it (the archive is broken by then), except
// that Add refuses a bad name argument without writing anything.
type Writer struct {
	tw     encoder
	buf    []byte
	stats  Stats
	err    error
	closed bool

	hash    *fileHash // set by HashFiles
	digests []FileDigest
	lend    lender // the archive's destination, when it lends its buffer
}

// lender is an archive destination that lends the free part of its own
// buffer (frame.Writer.Buffer): file data read straight into it and
// written back through the tar writer, which passes the slice on as it
// is, is not copied a second time.
type lender interface {
	Buffer() []byte
}

// encoder is what Writer writes entries through: a tar.Writer, or an
// entryWriter for FormatEntries.
type encoder interface {
	WriteHeader(*tar.Header) error
	Write([]byte) (int, error)
	Close() error
}

var errClosed = errors.New("transfer: writer closed")

// NewWriter returns a Writer that writes the archive to w. Close writes the
// end of the archive; it does not close w.
func NewWriter(w io.Writer) *Writer { return NewWriterFormat(w, FormatTar) }

// NewWriterFormat is NewWriter for an archive in format f; Extract reads
// it with ExtractOptions.Format f.
func NewWriterFormat(w io.Writer, f Format) *Writer {
	lend, _ := w.(lender)
	if f == FormatEntries {
		return &Writer{tw: &entryWriter{w: w}, lend: lend}
	}
	return &Writer{tw: tar.NewWriter(w), lend: lend}
}

// Add writes the tree at the local path src under the archive name name,
// a slash-separated relative path ("a/b") without ".." components. Name "."
// or "" puts the entries of a directory src at the archive root (src/x
// becomes x; src itself, and so its own mode and mtime, is not written);
// for a src that is not a directory it means filepath.Base(src).
//
// A directory is written before its contents, and its contents in
// byte-wise order of their names, so that the same tree always gives the
// same archive. Symlinks are stored as links, never followed, dangling ones
// included; src itself, if a symlink, is stored as a link too. Hard links
// are stored as separate regular files. Modes keep their permission bits and
// setuid, setgid and sticky (Extract drops those). A regular file is read
// up to the size it had when it was listed: one that grows meanwhile is cut
// there, one that shrinks is an error. A socket, device or FIFO in the
// source is an error naming its path, wrapping ErrUnsupported. ctx is
// checked before every entry.
func (w *Writer) Add(ctx context.Context, src, name string) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errClosed
	}
	prefix, err := archiveName(name)
	if err != nil {
		return fmt.Errorf("add %s: %w", src, err)
	}
	fi, err := os.Lstat(src)
	if err != nil {
		w.err = fmt.Errorf("add %s: %w", src, err)
		return w.err
	}
	if prefix == "" && !fi.IsDir() {
		prefix = filepath.Base(src)
	}
	if err := w.add(ctx, src, prefix, fi); err != nil {
		w.err = err
	}
	return w.err
}

// AddRoot writes the directory src as the archive's root: an entry "./"
// with src's mode and mtime, then src's contents as Add(ctx, src, ".")
// writes them. It is what `tar -C src -c .` writes, so that Extract with
// PlaceNew gives dest src's own mode and mtime. src is followed if it is a
// symlink, as `tar -C` does; it must be a directory. The root entry is not
// counted in Stats, as Extract does not count it.
func (w *Writer) AddRoot(ctx context.Context, src string) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errClosed
	}
	fi, err := os.Stat(src)
	if err != nil {
		w.err = fmt.Errorf("add %s: %w", src, err)
		return w.err
	}
	if !fi.IsDir() {
		w.err = fmt.Errorf("add %s: %w", src, syscall.ENOTDIR)
		return w.err
	}
	if err := ctx.Err(); err != nil {
		w.err = fmt.Errorf("add %s: %w", src, err)
		return w.err
	}
	hdr := &tar.Header{
		Typeflag: tar.TypeDir,
		Name:     "./",
		Mode:     ModeBits(fi.Mode()),
		ModTime:  fi.ModTime(),
		Format:   tar.FormatPAX,
	}
	if err := w.tw.WriteHeader(hdr); err != nil {
		w.err = fmt.Errorf("add %s: %w", src, err)
		return w.err
	}
	if err := w.add(ctx, src, "", fi); err != nil {
		w.err = err
	}
	return w.err
}

// archiveName checks Add's name argument and cleans it; "" is the root.
func archiveName(name string) (string, error) {
	if name == "" || name == "." {
		return "", nil
	}
	if strings.IndexByte(name, 0) >= 0 || path.IsAbs(name) {
		return "", fmt.Errorf("%w: archive name %q", ErrUnsafePath, name)
	}
	clean := path.Clean(name)
	if clean == "." {
		return "", nil
	}
	for c := range strings.SplitSeq(clean, "/") {
		if c == ".." {
			return "", fmt.Errorf("%w: archive name %q", ErrUnsafePath, name)
		}
	}
	return clean, nil
}

// add writes the entry for the local path p, already Lstat'ed as fi, as
// name ("" for the root of a "." Add, which has no entry of its own).
func (w *Writer) add(ctx context.Context, p, name string, fi fs.FileInfo) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("add %s: %w", p, err)
	}
	hdr := &tar.Header{
		Name:    name,
		Mode:    ModeBits(fi.Mode()),
		ModTime: fi.ModTime(),
		Format:  tar.FormatPAX,
	}
	switch mode := fi.Mode(); {
	case mode.IsDir():
		if name != "" {
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
			if err := w.tw.WriteHeader(hdr); err != nil {
				return fmt.Errorf("add %s: %w", p, err)
			}
			w.stats.Dirs++
		}
		entries, err := os.ReadDir(p) // sorted by name, byte-wise
		if err != nil {
			return fmt.Errorf("add %s: %w", p, err)
		}
		for _, e := range entries {
			cp := filepath.Join(p, e.Name())
			cfi, err := e.Info()
			if err != nil {
				return fmt.Errorf("add %s: %w", cp, err)
			}
			if err := w.add(ctx, cp, path.Join(name, e.Name()), cfi); err != nil {
				return err
			}
		}
		return nil
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return fmt.Errorf("add %s: %w", p, err)
		}
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = target
		if err := w.tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("add %s: %w", p, err)
		}
		w.stats.Symlinks++
		return nil
	case mode.IsRegular():
		return w.addFile(p, hdr, fi)
	default:
		return fmt.Errorf("add %s: %w: %s", p, ErrUnsupported, kindOf(mode))
	}
}

func (w *Writer) addFile(p string, hdr *tar.Header, fi fs.FileInfo) error {
	// The path may have been replaced since it was listed (by a FIFO, a
	// symlink to a device): write only the file that was listed.
	f, err := openListed(p, fi)
	if err != nil {
		return fmt.Errorf("add %s: %w", p, err)
	}
	defer f.Close()
	hdr.Typeflag = tar.TypeReg
	hdr.Size = fi.Size()
	if err := w.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("add %s: %w", p, err)
	}
	if err := w.copyData(hdr, f); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("add %s: file shrank while being read: %w", p, err)
		}
		return fmt.Errorf("add %s: %w", p, err)
	}
	return nil
}

// HashFiles makes Add compute the digest (FileDigest) of every regular file it writes
// from then on, in the pass that copies the data, and record its
// FileDigest for Digests. Without it nothing is hashed.
func (w *Writer) HashFiles() {
	if w.hash == nil {
		w.hash = newFileHash()
	}
}

// Digests lists the regular files written since HashFiles, in archive
// order. The slice is the Writer's own: it grows with later Adds.
func (w *Writer) Digests() []FileDigest { return w.digests }

// ModeBits maps a Go file mode to the Unix mode bits tar's mode field and
// the agent protocol carry: permission bits plus setuid (04000), setgid
// (02000) and sticky (01000).
func ModeBits(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "irregular file"
}

// Stats counts what has been written so far.
func (w *Writer) Stats() Stats { return w.stats }

// Close writes the end-of-archive blocks. It does not close the underlying
// writer. A second Close returns nil.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return nil
	}
	w.closed = true
	if err := w.tw.Close(); err != nil {
		w.err = fmt.Errorf("close archive: %w", err)
	}
	return w.err
}

// Header describes an entry that WriteEntry writes from metadata rather
// than from a local file: a tree rebuilt from somewhere else, such as a
// session snapshot.
type Header struct {
	// Name is the archive name, as for Add; "." is the archive's root
	// entry ("./", Kind Dir only), which gives a PlaceNew destination its
	// mode and mtime and is not counted in Stats, as AddRoot's is not.
	Name string
	Kind Kind // Dir, File or Symlink
	// Mode keeps its permission bits, setuid, setgid and sticky, as Add
	// does.
	Mode    fs.FileMode
	ModTime time.Time
	Size    int64  // of a File
	Target  string // of a Symlink
}

// WriteEntry writes the entry h; for a File, r supplies its content, of
// which exactly h.Size bytes are read (fewer is an error). Entries go out
// in the caller's order: a directory must come before what it holds. A
// bad name or kind is refused without writing anything; other failures
// break the archive, as Add's do. Files are hashed as Add hashes them
// after HashFiles.
func (w *Writer) WriteEntry(ctx context.Context, h Header, r io.Reader) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errClosed
	}
	name, err := archiveName(h.Name)
	if err != nil {
		return fmt.Errorf("write entry: %w", err)
	}
	if name == "" && h.Kind != Dir {
		return fmt.Errorf("write entry %q: %w: the root must be a directory", h.Name, ErrUnsafePath)
	}
	if err := ctx.Err(); err != nil {
		w.err = fmt.Errorf("write entry %q: %w", h.Name, err)
		return w.err
	}
	hdr := &tar.Header{Name: name, Mode: ModeBits(h.Mode), ModTime: h.ModTime, Format: tar.FormatPAX}
	switch h.Kind {
	case Dir:
		hdr.Typeflag = tar.TypeDir
		if name == "" {
			hdr.Name = "./"
		} else {
			hdr.Name += "/"
		}
	case Symlink:
		if h.Target == "" {
			return fmt.Errorf("write entry %q: symlink without a target", h.Name)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, h.Target
	case File:
		if h.Size < 0 || r == nil {
			return fmt.Errorf("write entry %q: file of %d bytes without content", h.Name, h.Size)
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, h.Size
	default:
		return fmt.Errorf("write entry %q: %w: %s", h.Name, ErrUnsupported, h.Kind)
	}
	if err := w.tw.WriteHeader(hdr); err != nil {
		w.err = fmt.Errorf("write entry %q: %w", h.Name, err)
		return w.err
	}
	switch {
	case h.Kind == Dir && name != "":
		w.stats.Dirs++
	case h.Kind == Symlink:
		w.stats.Symlinks++
	case h.Kind == File:
		if err := w.copyData(hdr, r); err != nil {
			w.err = fmt.Errorf("write entry %q: %w", h.Name, err)
			return w.err
		}
	}
	return nil
}

// copyData writes the hdr.Size bytes of a regular file's content from r,
// counting and (after HashFiles) hashing them.
func (w *Writer) copyData(hdr *tar.Header, r io.Reader) error {
	if w.hash != nil {
		w.hash.Reset()
	}
	var n int64
	var err error
	if w.lend != nil {
		n, err = w.copyLent(hdr.Size, r)
	} else {
		if w.buf == nil {
			w.buf = make([]byte, 256<<10)
		}
		var dst io.Writer = onlyWriter{w.tw}
		if w.hash != nil {
			dst = io.MultiWriter(w.tw, w.hash)
		}
		n, err = io.CopyBuffer(dst, onlyReader{io.LimitReader(r, hdr.Size)}, w.buf)
	}
	w.stats.Bytes += n
	if err != nil {
		return err
	}
	if n < hdr.Size {
		return fmt.Errorf("%d of %d bytes: %w", n, hdr.Size, io.ErrUnexpectedEOF)
	}
	w.stats.Files++
	if w.hash != nil {
		d := FileDigest{Name: hdr.Name, Size: n}
		sumInto(w.hash, &d.Sum)
		w.digests = append(w.digests, d)
	}
	return nil
}

// copyLent is copyData's loop reading into the destination's own buffer
// (see lender): up to size bytes of r, hashed and written.
func (w *Writer) copyLent(size int64, r io.Reader) (int64, error) {
	var n int64
	for n < size {
		buf := w.lend.Buffer()
		if int64(len(buf)) > size-n {
			buf = buf[:size-n]
		}
		k, err := r.Read(buf)
		if k > 0 {
			if w.hash != nil {
				w.hash.Write(buf[:k])
			}
			if _, werr := w.tw.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// GoMode is the inverse of ModeBits.
func GoMode(bits int64) fs.FileMode {
	mode := fs.FileMode(bits & 0o777)
	if bits&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if bits&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if bits&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}
