package archive

import (
	"archive/tar"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ferry-dev/ferry/internal/fdfile"
)

// Placement says where Extract puts the tree it staged.
type Placement int

const (
	// PlaceNew: dest must not exist (its parent must); the staged tree
	// becomes dest. A root entry ("./", as `tar -C dir -c .` writes) gives
	// dest its mode and mtime; without one dest gets 0777 less the umask.
	PlaceNew Placement = iota
	// PlaceInto: dest is an existing directory; each top-level entry of
	// the archive goes to dest/<entry>. Directories merge into existing
	// directories (recursively, an explicit directory entry's mode and mtime
	// winning); anything else is placed by rename, which replaces an existing
	// file or symlink atomically. A directory over a non-directory or the
	// reverse is an error naming the entry, wrapping fs.ErrExist, found before
	// anything is placed. dest's own mode and mtime are left alone.
	PlaceInto
	// PlaceAs: the archive holds exactly one top-level entry (any name),
	// which becomes dest. dest must not exist, or be a file or symlink that a
	// non-directory entry replaces atomically.
	PlaceAs
)

func (p Placement) String() string {
	switch p {
	case PlaceNew:
		return "PlaceNew"
	case PlaceInto:
		return "PlaceInto"
	case PlaceAs:
		return "PlaceAs"
	}
	return fmt.Sprintf("Placement(%d)", int(p))
}

// ExtractOptions configures Extract. The zero value is PlaceNew with
// DefaultLimits, no chown, every entry kept.
type ExtractOptions struct {
	Limits Limits
	Place  Placement
	// Names, when non-nil, are the names the stream was asked for, as the
	// sender was given them: relative paths ("a", "./a", "a/b/"), or "."
	// for a whole directory's contents, which allows every name (as nil
	// does). Every entry must then be one of them or under one, and the
	// root entry ("./") comes only with "."; anything else is refused
	// (ErrUnrequested, naming the entry) before anything is placed. A
	// download sets it: a sandbox's tar asked for "payload" must not put
	// a .bashrc beside it. With PlaceAs, Names is the one name asked for.
	// An empty non-nil Names, or an unsafe name in it, is an error of the
	// call.
	Names []string
	// Chown restores the archive's numeric uid and gid (never its user and
	// group names). It is honoured only when running as root; otherwise, and
	// by default, everything belongs to the user running Extract.
	Chown bool
	// Select, when non-nil, is asked about every entry but the root, by its
	// cleaned name ("a/b", no "./", no trailing slash), and keeps only those
	// it returns true for. Skipped entries are still read and checked
	// (name, type, limits) but not created; a kept entry under a skipped
	// directory gets a plain directory; a hard link to a skipped file is
	// refused.
	Select func(name string) bool
	// Verify, when non-nil, is called once the whole stream has been read
	// and checked, before anything is placed, with what the stream held;
	// an error from it leaves dest untouched and is returned as is. A
	// caller checks a trailer here, such as the sender's own count.
	Verify func(Stats) error
	// Format is the stream's format (FormatTar by default), as its
	// writer's NewWriterFormat had it.
	Format Format
	// OnFile, when non-nil, makes Extract hash every regular file it keeps,
	// in the pass that writes it, and call OnFile with its FileDigest once
	// the file is complete in the staging tree, in stream order (a later
	// entry of the same name is reported again). Hard links have no data
	// of their own and are not reported. It is called before Verify and
	// before anything is placed; an error from it stops the extraction as
	// an *EntryError naming the entry. A caller collects the digests here
	// and compares them with the sender's in Verify.
	OnFile func(FileDigest) error
	// Staging, when set, is the name of the staging directory, created
	// exclusively beside the destination (in it, for PlaceInto) instead of
	// a random name: a caller that may be killed mid-stream chooses it, so
	// that whoever cleans up after it knows what to remove. It must be one
	// path element: StagingPrefix and 1 to 64 lower-case hex digits,
	// which is what RemoveStaleStaging recognises.
	Staging string
	// OnStale, when non-nil, is told how many stale staging directories
	// (see RemoveStaleStaging) Extract removed from the directory it
	// stages in, before it made its own, and the first error it met
	// doing so; it is called only when there was one or the other. A
	// failure there does not fail the extraction.
	OnStale func(removed int, err error)
}

// StagingPrefix begins the name of every staging directory.
const StagingPrefix = ".ferry-staging-"

// Extract reads a tar stream from r and places the tree it holds at dest.
//
// Everything is first written through an os.Root opened on a staging
// directory (hidden, 0700) beside dest: in dest's parent for PlaceNew and
// PlaceAs, inside dest for PlaceInto, so that placing is a rename on one
// filesystem. Only after the whole stream has been read and checked,
// including a proper end of archive (two zero blocks: a stream that stops
// without them is ErrTruncated), is anything renamed into place. On any
// error from the stream nothing appears at dest, dest's previous content is
// untouched, and the staging directory is removed. A staging directory is
// locked while it is live, so that one a killed Extract left behind can be
// told from the live one of a concurrent Extract: Extract first removes
// the stale ones in the directory it stages in (see RemoveStaleStaging).
//
// What is refused, each as an *EntryError naming the entry (see the
// sentinels): absolute names and ".." components; names outside
// opts.Names; device, FIFO, sparse and unknown entries; writing through a
// symlink, or changing the type of a path an earlier entry created (a
// later regular file replaces an earlier one); symlinks that resolve
// outside the tree, lexically or through other symlinks of the stream,
// checked again once the tree is complete; hard links to anything but a
// regular file extracted earlier; anything over opts.Limits. Setuid, setgid and sticky bits are dropped. Modes are
// restored exactly, not reduced by the umask. Modification times are
// restored to the nanosecond on files, symlinks and directories (these after
// their contents); access times are left to the system.
//
// Errors about the call itself (dest exists for PlaceNew, its parent is
// missing, a limit is negative) come before anything is read and are not
// EntryErrors; a PlaceInto or PlaceAs conflict with what dest holds is an
// *EntryError wrapping fs.ErrExist.
//
// Extract stops reading at the end-of-archive marker: whatever follows it
// in r (GNU tar pads its output to 10 KiB records) is left unread. Stats
// count the entries kept; on error, those read before it.
//
// Limitations: placing is a sequence of renames; if one fails midway (the
// disk, a concurrent writer in dest), entries placed before it stay. File
// data is not fsynced. Directory metadata is held in memory until the end,
// so memory grows with the number of directories (as in GNU tar).
func Extract(ctx context.Context, r io.Reader, dest string, opts ExtractOptions) (_ Stats, err error) {
	lim, err := opts.Limits.WithDefaults()
	if err != nil {
		return Stats{}, err
	}
	req, err := requestedNames(opts.Names, lim.MaxPathLen)
	if err != nil {
		return Stats{}, err
	}
	st, err := newStage(ctx, dest, opts.Place, opts.Staging, opts.OnStale)
	if err != nil {
		return Stats{}, err
	}
	defer func() {
		if cerr := st.cleanup(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	sr := &streamReader{r: r, ctx: ctx}
	x := &extractor{
		ctx:    ctx,
		root:   st.root,
		lim:    lim,
		sel:    opts.Select,
		req:    req,
		onFile: opts.OnFile,
		chown:  opts.Chown && os.Geteuid() == 0,
		sr:     sr,
		dirs:   map[string]*dirMeta{rootName: {}},
		held:   fdfile.HeldDir{Root: st.root},
	}
	if opts.Format == FormatEntries {
		x.er = newEntryReader(sr, lim.MaxHeaderSize)
		x.data = x.er
	} else {
		x.tr = tar.NewReader(sr)
		x.data = x.tr
	}
	x.umask, x.exactCreate = createMask(st.tree)
	err = x.run()
	x.held.Close()
	if err != nil {
		return x.stats, err
	}
	if err := x.checkLinks(); err != nil {
		return x.stats, err
	}
	if opts.Verify != nil {
		if err := opts.Verify(x.stats); err != nil {
			return x.stats, err
		}
	}
	if err := st.place(x); err != nil {
		if ee := (*EntryError)(nil); !errors.As(err, &ee) {
			err = &EntryError{Op: "place", Err: err}
		}
		return x.stats, err
	}
	return x.stats, nil
}

// extractor holds the state of one Extract while the stream is read.
type extractor struct {
	ctx   context.Context
	root  *os.Root // the staged tree
	lim   Limits
	sel   func(string) bool
	req   map[string]bool // cleaned Names; nil allows every name
	chown bool

	onFile func(FileDigest) error
	hash   *fileHash // for onFile
	sr     *streamReader
	tr     *tar.Reader  // FormatTar
	er     *entryReader // FormatEntries
	data   io.Reader    // the current entry's data: tr or er
	buf    []byte
	stats  Stats

	entries int64 // headers read
	total   int64 // regular-file bytes declared so far
	last    string

	// dirs holds every directory in the staged tree by cleaned name, root
	// included: the stream can only add to the tree, never turn a directory
	// into something else, so a name found here is a real directory and no
	// symlink lies on the way to it.
	dirs  map[string]*dirMeta
	links []linkRec // symlinks created, in stream order

	// held is the staged directory the last file was created in: a tar
	// stream lists a directory's files together, so most files are
	// created one openat(2) away from it. It stays valid however the
	// stream goes on: a directory of the staged tree is never removed or
	// replaced (see dirs).
	held fdfile.HeldDir

	// exactCreate: a file created with mode m in the staged tree gets m
	// less umask, no more and no less (see createMask), so a file whose
	// mode has no umask bit is created with it and not chmodded after: a
	// syscall fewer a file, a tenth of extracting small files.
	exactCreate bool
	umask       uint32
}

// dirMeta is what a directory entry asked for; applied after the stream,
// deepest first, since creating children changes a directory's mtime.
type dirMeta struct {
	explicit bool
	entry    string // raw name, for errors
	mode     fs.FileMode
	mtime    time.Time
}

type linkRec struct{ name, entry string }

func (x *extractor) run() error {
	for {
		if err := x.ctx.Err(); err != nil {
			return &EntryError{Entry: x.last, Op: "extract", Err: err}
		}
		hdr, err := x.header()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		x.entries++
		x.last = hdr.Name
		if x.entries > x.lim.MaxEntries {
			return &EntryError{Entry: hdr.Name, Op: "extract", Err: fmt.Errorf("%w: more than %d entries", ErrLimit, x.lim.MaxEntries)}
		}
		if err := x.entry(hdr); err != nil {
			return &EntryError{Entry: hdr.Name, Op: "extract", Err: err}
		}
	}
}

// header reads the next entry's header in the stream's format: io.EOF at
// the archive's proper end, and otherwise an *EntryError naming the entry
// as well as what was read allows.
func (x *extractor) header() (*tar.Header, error) {
	var hdr *tar.Header
	var err error
	if x.er != nil {
		hdr, err = x.er.Next()
	} else {
		x.sr.beginHeader(x.lim.MaxHeaderSize)
		hdr, err = x.tr.Next()
		x.sr.endHeader()
		if errors.Is(err, tar.ErrInsecurePath) && hdr != nil {
			err = nil // GODEBUG=tarinsecurepath=0; cleanName refuses the name itself
		}
		if err == io.EOF && !x.sr.completeEOA() {
			return nil, &EntryError{Entry: x.last, Op: "end of archive", Err: fmt.Errorf("%w: stream ends without the end-of-archive blocks", ErrTruncated)}
		}
	}
	switch {
	case err == nil, err == io.EOF:
		return hdr, err
	case x.ctx.Err() != nil && errors.Is(err, x.ctx.Err()):
		return nil, &EntryError{Entry: x.last, Op: "extract", Err: err}
	case x.er != nil:
		return nil, &EntryError{Entry: cmp.Or(x.er.name, fmt.Sprintf("#%d", x.entries+1)), Op: "read header", Err: err}
	}
	return nil, x.sr.headerError(err, x.entries+1)
}

func (x *extractor) entry(hdr *tar.Header) error {
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil // archive/tar has read its records; nothing to create
	case typeGNUVolume:
		// A label for the whole archive; nothing to create, but any data
		// counts like a file's.
		if err := x.account(hdr.Size); err != nil {
			return err
		}
		return x.drain(hdr.Size)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo, tar.TypeGNUSparse:
		return fmt.Errorf("%w: %s", ErrUnsupported, typeName(hdr.Typeflag))
	case tar.TypeReg, tar.TypeCont, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	default:
		return fmt.Errorf("%w: %s", ErrUnsupported, typeName(hdr.Typeflag))
	}
	if paxSparse(hdr) {
		// archive/tar expands a sparse file transparently: a few KiB on
		// the wire would become MaxFileSize of zeros on the host, past
		// every ratio limit. ferry's writers never make one.
		return fmt.Errorf("%w: PAX sparse file (GNU.sparse.* records)", ErrUnsupported)
	}
	name, err := cleanName(hdr.Name, x.lim.MaxPathLen)
	if err != nil {
		return err
	}
	if !x.requested(name) {
		return fmt.Errorf("%w: neither a name asked for nor under one", ErrUnrequested)
	}
	keep := name == rootName || x.sel == nil || x.sel(name)
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.dir(hdr, name, keep)
	case tar.TypeSymlink:
		return x.symlink(hdr, name, keep)
	case tar.TypeLink:
		return x.hardlink(hdr, name, keep)
	default:
		return x.file(hdr, name, keep)
	}
}

// paxSparse reports a file that archive/tar would read as a PAX-format
// GNU sparse file (formats 0.0, 0.1 and 1.0, all announced by GNU.sparse.*
// records), or that carries such records at all.
func paxSparse(hdr *tar.Header) bool {
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// requestedNames cleans ExtractOptions.Names: nil, or a list holding ".",
// allows every name (a nil map).
func requestedNames(names []string, maxLen int) (map[string]bool, error) {
	if names == nil {
		return nil, nil
	}
	if len(names) == 0 {
		return nil, errors.New("transfer: extract: empty Names")
	}
	req := make(map[string]bool, len(names))
	for _, n := range names {
		c, err := cleanName(n, maxLen)
		if err != nil {
			return nil, fmt.Errorf("transfer: extract: requested name %q: %w", clip(n), err)
		}
		if c == rootName {
			return nil, nil
		}
		req[c] = true
	}
	return req, nil
}

// requested reports whether a cleaned entry name is one of the requested
// names or under one.
func (x *extractor) requested(name string) bool {
	if x.req == nil {
		return true
	}
	for p := name; p != rootName; p = parentDir(p) {
		if x.req[p] {
			return true
		}
	}
	return false
}

func typeName(flag byte) string {
	switch flag {
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "FIFO"
	case 'D':
		return "GNU incremental directory"
	case 'M':
		return "GNU multi-volume continuation"
	case tar.TypeGNUSparse:
		return "GNU sparse file"
	}
	return fmt.Sprintf("type flag %q", flag)
}

func (x *extractor) file(hdr *tar.Header, name string, keep bool) error {
	if err := x.account(hdr.Size); err != nil {
		return err
	}
	if name == rootName {
		return fmt.Errorf("%w: a file as the archive's root", ErrUnsafePath)
	}
	if !keep {
		return x.drain(hdr.Size)
	}
	if err := x.mkParents(name); err != nil {
		return err
	}
	perm, modeSet := uint32(0o600), false
	if m := uint32(fileMode(hdr.Mode)); x.exactCreate && m&x.umask == 0 {
		perm, modeSet = m, true
	}
	// Most names are new: try the exclusive create first, and look at
	// what is in the way only when something is.
	f, err := x.create(name, perm)
	if errors.Is(err, fs.ErrExist) {
		if err := x.prepare(name, "file"); err != nil {
			return err
		}
		f, err = x.create(name, perm)
	}
	if err != nil {
		return err
	}
	var dst io.Writer = onlyWriter{f}
	if x.onFile != nil {
		if x.hash == nil {
			x.hash = newFileHash()
		}
		x.hash.Reset()
		dst = io.MultiWriter(f, x.hash)
	}
	n, err := io.CopyBuffer(dst, onlyReader{x.data}, x.buffer(hdr.Size))
	x.stats.Bytes += n
	if err != nil {
		f.Close()
		return x.dataErr(err)
	}
	byPath, err := x.setOpenFileMeta(f, hdr, modeSet)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	x.stats.Files++
	if byPath {
		if err := x.setMeta(name, hdr); err != nil {
			return err
		}
	}
	if x.onFile != nil {
		d := FileDigest{Name: name, Size: n}
		sumInto(x.hash, &d.Sum)
		return x.onFile(d)
	}
	return nil
}

// create makes the regular file name (mode perm less the umask,
// exclusively, never through a symlink) in its parent, which mkParents
// has made a directory of the staged tree.
func (x *extractor) create(name string, perm uint32) (stagedFile, error) {
	dir := parentDir(name)
	d, err := x.held.Open(dir)
	if err != nil {
		return nil, err
	}
	base := name
	if dir != rootName {
		base = name[len(dir)+1:]
	}
	return createAt(d, base, perm)
}

// stagedFile is a regular file the extractor creates and writes, whose
// owner, mode and mtime it then sets through the descriptor.
type stagedFile interface {
	io.WriteCloser
	Chown(uid, gid int) error
	Chmod(fs.FileMode) error
	// SetMtime sets the mtime and leaves the atime; errors.ErrUnsupported
	// where only a path can.
	SetMtime(time.Time) error
}

// setOpenFileMeta restores a regular file's owner, mode (unless modeSet:
// the file was created with it) and mtime through its descriptor. byPath
// reports that this platform cannot, and setMeta must do it by name.
func (x *extractor) setOpenFileMeta(f stagedFile, hdr *tar.Header, modeSet bool) (byPath bool, err error) {
	if x.chown {
		// Chown first: it may clear mode bits (setuid and setgid, which
		// fileMode drops, so a mode set at creation stays).
		if err := f.Chown(hdr.Uid, hdr.Gid); err != nil {
			return false, err
		}
	}
	if !modeSet {
		if err := f.Chmod(fileMode(hdr.Mode)); err != nil {
			return false, err
		}
	}
	if err := f.SetMtime(hdr.ModTime); errors.Is(err, errors.ErrUnsupported) {
		return true, nil
	} else if err != nil {
		return false, err
	}
	return false, nil
}

// account checks an entry's data size against the limits before any of it
// is read, and counts it.
func (x *extractor) account(size int64) error {
	if size > x.lim.MaxFileSize {
		return fmt.Errorf("%w: file is %d bytes, at most %d", ErrLimit, size, x.lim.MaxFileSize)
	}
	if size > x.lim.MaxTotalBytes-x.total {
		return fmt.Errorf("%w: files total more than %d bytes", ErrLimit, x.lim.MaxTotalBytes)
	}
	x.total += size
	return nil
}

// drain reads the rest of the entry's data, so that the next header is
// read with nothing before it but padding.
func (x *extractor) drain(size int64) error {
	_, err := io.CopyBuffer(io.Discard, onlyReader{x.data}, x.buffer(size))
	return x.dataErr(err)
}

// dataErr maps an error met while copying an entry's data.
func (x *extractor) dataErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: inside the file's data", ErrTruncated)
	}
	return err
}

func (x *extractor) dir(hdr *tar.Header, name string, keep bool) error {
	meta := &dirMeta{explicit: true, entry: hdr.Name, mode: fileMode(hdr.Mode), mtime: hdr.ModTime}
	if name == rootName {
		x.dirs[rootName] = meta
		return x.lchown(name, hdr)
	}
	if !keep {
		return nil
	}
	if err := x.mkParents(name); err != nil {
		return err
	}
	x.stats.Dirs++
	if _, ok := x.dirs[name]; ok {
		x.dirs[name] = meta // a later entry for the same directory wins
		return x.lchown(name, hdr)
	}
	if err := x.absent(name, "directory"); err != nil {
		return err
	}
	// 0700 while the stream fills it; its own mode comes at the end.
	if err := x.root.Mkdir(name, 0o700); err != nil {
		return err
	}
	x.dirs[name] = meta
	return x.lchown(name, hdr)
}

func (x *extractor) symlink(hdr *tar.Header, name string, keep bool) error {
	if err := checkLinkTarget(name, hdr.Linkname, x.lim.MaxPathLen); err != nil {
		return err
	}
	if name == rootName {
		return fmt.Errorf("%w: a symlink as the archive's root", ErrUnsafePath)
	}
	if !keep {
		return nil
	}
	if err := x.mkParents(name); err != nil {
		return err
	}
	if err := x.absent(name, "symlink"); err != nil {
		return err
	}
	if err := x.root.Symlink(hdr.Linkname, name); err != nil {
		return err
	}
	x.links = append(x.links, linkRec{name: name, entry: hdr.Name})
	x.stats.Symlinks++
	if err := x.lchown(name, hdr); err != nil {
		return err
	}
	return lchtimes(x.root, name, hdr.ModTime)
}

func (x *extractor) hardlink(hdr *tar.Header, name string, keep bool) error {
	target, err := cleanName(hdr.Linkname, x.lim.MaxPathLen)
	switch {
	case errors.Is(err, ErrUnsafePath):
		return fmt.Errorf("%w: hard link target %q is empty, absolute or has a \"..\" component", ErrLinkEscape, clip(hdr.Linkname))
	case err != nil:
		return err
	case target == rootName || target == name:
		return fmt.Errorf("%w: hard link to %q", ErrLinkEscape, clip(hdr.Linkname))
	case name == rootName:
		return fmt.Errorf("%w: a hard link as the archive's root", ErrUnsafePath)
	}
	if !keep {
		return nil
	}
	notEarlier := fmt.Errorf("%w: hard link target %q is not a regular file extracted earlier", ErrLinkEscape, clip(hdr.Linkname))
	if _, ok := x.dirs[parentDir(target)]; !ok {
		return notEarlier // through a symlink, or never extracted
	}
	fi, err := x.root.Lstat(target)
	if err != nil || !fi.Mode().IsRegular() {
		return notEarlier
	}
	if err := x.prepare(name, "hard link"); err != nil {
		return err
	}
	if err := x.root.Link(target, name); err != nil {
		return err
	}
	x.stats.Files++
	return nil
}

// mkParents makes sure every directory above name is a real directory of
// the staged tree, creating missing ones (0777 less the umask, as tar does).
func (x *extractor) mkParents(name string) error {
	for i := 0; ; {
		j := strings.IndexByte(name[i:], '/')
		if j < 0 {
			return nil
		}
		p := name[:i+j]
		i += j + 1
		if _, ok := x.dirs[p]; ok {
			continue
		}
		fi, err := x.root.Lstat(p)
		switch {
		case err == nil && fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("%w: would write through the symlink %q", ErrUnsafePath, clip(p))
		case err == nil && fi.IsDir():
			// Only on a case- or normalization-insensitive filesystem: the
			// stream made this directory under another spelling.
			return fmt.Errorf("%w: parent %q is another spelling of a directory", ErrUnsafePath, clip(p))
		case err == nil:
			return fmt.Errorf("%w: parent %q is not a directory", ErrUnsafePath, clip(p))
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		if err := x.root.Mkdir(p, 0o777); err != nil {
			return err
		}
		x.dirs[p] = &dirMeta{}
	}
}

// prepare makes way for a regular file or hard link at name: its parents
// exist, and an earlier regular file there is removed (the later entry
// wins; it is replaced, never written through, since it may share its
// inode with a hard link). Anything else there is refused.
func (x *extractor) prepare(name, kind string) error {
	if err := x.mkParents(name); err != nil {
		return err
	}
	fi, err := x.root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode().IsRegular():
		return x.root.Remove(name)
	}
	return fmt.Errorf("%w: a %s over the %s an earlier entry made", ErrUnsafePath, kind, describe(fi.Mode()))
}

// absent refuses to put a directory or symlink where anything exists.
func (x *extractor) absent(name, kind string) error {
	fi, err := x.root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("%w: a %s over the %s an earlier entry made", ErrUnsafePath, kind, describe(fi.Mode()))
}

func describe(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsRegular():
		return "file"
	}
	return "special file"
}

// fileMode keeps the permission bits of a tar mode: setuid, setgid and
// sticky are dropped (DESIGN.md).
func fileMode(m int64) fs.FileMode { return fs.FileMode(m & 0o777) }

func (x *extractor) lchown(name string, hdr *tar.Header) error {
	if !x.chown {
		return nil
	}
	return x.root.Lchown(name, hdr.Uid, hdr.Gid)
}

// setMeta restores a regular file's owner, mode and mtime. Chown comes
// first: it may clear mode bits.
func (x *extractor) setMeta(name string, hdr *tar.Header) error {
	if err := x.lchown(name, hdr); err != nil {
		return err
	}
	if err := x.root.Chmod(name, fileMode(hdr.Mode)); err != nil {
		return err
	}
	return x.root.Chtimes(name, time.Time{}, hdr.ModTime)
}

// checkLinks resolves every symlink of the finished tree. Checking each link
// lexically when it is created is not enough: with b -> "." and
// a -> "b/../x", each stays inside on its own, but a resolves to ../x; and
// the link that makes another escape may come later in the stream.
func (x *extractor) checkLinks() error {
	for _, l := range x.links {
		if err := resolveLink(x.root, l.name, x.lim.MaxLinkDepth); err != nil {
			return &EntryError{Entry: l.entry, Op: "symlink", Err: err}
		}
	}
	return nil
}

// applyDirMeta gives the staged directories the modes and mtimes their
// entries asked for, deepest first, skipping those for which skip is true
// (directories that will merge into existing ones). The root is left to
// the caller.
func (x *extractor) applyDirMeta(skip func(name string) bool) error {
	names := make([]string, 0, len(x.dirs))
	for name, d := range x.dirs {
		if d.explicit && name != rootName && (skip == nil || !skip(name)) {
			names = append(names, name)
		}
	}
	// A descendant "p/c" sorts after its ancestor "p": reverse order puts
	// children first.
	slices.Sort(names)
	slices.Reverse(names)
	for _, name := range names {
		d := x.dirs[name]
		if err := x.root.Chmod(name, d.mode); err != nil {
			return &EntryError{Entry: d.entry, Op: "extract", Err: err}
		}
		if err := x.root.Chtimes(name, time.Time{}, d.mtime); err != nil {
			return &EntryError{Entry: d.entry, Op: "extract", Err: err}
		}
	}
	return nil
}

// buffer is the copy buffer for an entry of size bytes: grown as
// entries need it, up to copyBuffer, so that a stream of a few small
// files does not pay for a MiB (zeroed, faulted in) it never fills.
func (x *extractor) buffer(size int64) []byte {
	if want := max(min(size, copyBuffer), minCopyBuffer); int64(len(x.buf)) < want {
		x.buf = make([]byte, min(max(want, 2*int64(len(x.buf))), copyBuffer))
	}
	return x.buf
}

// minCopyBuffer is the first size of the extractor's copy buffer.
const minCopyBuffer = 32 << 10

// copyBuffer is the extractor's buffer for file contents. It holds a
// whole frame block of agent mode (1 MiB), so that most blocks decode
// straight into it (see frame.Reader.Read) instead of being copied
// there.
const copyBuffer = 1 << 20

// onlyReader and onlyWriter hide ReaderFrom/WriterTo so that io.CopyBuffer
// uses the extractor's buffer.
type onlyReader struct{ io.Reader }
type onlyWriter struct{ io.Writer }

// typeGNUVolume is GNU tar's volume label ('V'), which archive/tar does not
// name.
const typeGNUVolume = 'V'
