package transfertest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TreeOptions shapes RandomTree. Zero fields take the defaults in brackets.
type TreeOptions struct {
	Entries     int   // files, directories and symlinks, roughly [80]
	MaxDepth    int   // of the random part [4]
	MaxFileSize int64 // of an ordinary file [64 KiB]
	BigFiles    int   // files of BigFileSize on top [0]
	BigFileSize int64 // [4 MiB]
	NoSymlinks  bool  // for peers that cannot take them
}

// Tree counts what RandomTree made, in archive.Stats' terms: Dirs leaves
// out the root.
type Tree struct {
	Files, Dirs, Symlinks, Bytes int64
}

// RandomTree fills the existing directory dir with a tree drawn from seed:
// the same seed gives the same tree. It always holds an empty directory, a
// zero-byte file, names with spaces and non-ASCII letters, names over 100
// bytes, a path over 255 bytes, symlinks to files, to directories, to other
// symlinks and dangling ones (all relative and resolving inside dir), modes
// such as 0600, 0700, 0755 and 0444, and nanosecond mtimes on everything.
// Directories keep owner write permission so that t.TempDir can remove them.
func RandomTree(t testing.TB, dir string, seed int64, opts TreeOptions) Tree {
	t.Helper()
	opts.setDefaults()
	g := &gen{
		t:    t,
		root: dir,
		rnd:  rand.New(rand.NewPCG(uint64(seed), 0x5eed)),
		data: rand.NewChaCha8(seedBytes(seed)),
		opts: opts,
	}
	g.fixed()
	g.dir("", 0)
	for range opts.BigFiles {
		g.file(g.pickDir(), g.uniqueName(""), opts.BigFileSize)
	}
	if !opts.NoSymlinks {
		g.symlinks()
	}
	g.finish()
	return g.tree
}

func (o *TreeOptions) setDefaults() {
	if o.Entries == 0 {
		o.Entries = 80
	}
	if o.MaxDepth == 0 {
		o.MaxDepth = 4
	}
	if o.MaxFileSize == 0 {
		o.MaxFileSize = 64 << 10
	}
	if o.BigFileSize == 0 {
		o.BigFileSize = 4 << 20
	}
}

func seedBytes(seed int64) [32]byte {
	var b [32]byte
	for i := range 8 {
		b[i] = byte(seed >> (8 * i))
	}
	copy(b[8:], "ferry transfertest random tree")
	return b
}

type gen struct {
	t     testing.TB
	root  string
	rnd   *rand.Rand
	data  *rand.ChaCha8
	opts  TreeOptions
	made  int
	tree  Tree
	dirs  []string // relative, "" is the root
	files []string // regular files and directories, targets for symlinks
	links []string
	names map[string]bool
	times map[string]time.Time // directories' mtimes, set last
	modes map[string]os.FileMode
}

var (
	nameParts = []string{
		"plain", "with space", " leading space", "trailing space ", "ünïcödé",
		"日本語のファイル", "emoji-🚀", ".hidden", "-dash", "a.b.c", "#hash",
		"quote'single", `quote"double`, `back\slash`, "$dollar", "star*?",
		"Ωmega", "ελληνικά", "русский", "mixed Ünï 名前", "semi;colon", "amp&",
		"paren(1)", "x",
	}
	fileModes = []os.FileMode{0o644, 0o600, 0o755, 0o700, 0o400, 0o444, 0o640, 0o664}
	dirModes  = []os.FileMode{0o755, 0o700, 0o750, 0o775, 0o711}
)

func (g *gen) must(err error) {
	if err != nil {
		g.t.Helper()
		g.t.Fatalf("random tree: %v", err)
	}
}

func (g *gen) abs(rel string) string { return filepath.Join(g.root, filepath.FromSlash(rel)) }

// uniqueName draws a name not used before in the whole tree (so that
// symlink targets stay unambiguous), sometimes long.
func (g *gen) uniqueName(hint string) string {
	if g.names == nil {
		g.names = map[string]bool{}
	}
	for i := 0; ; i++ {
		var n string
		switch {
		case hint != "":
			n = hint
		case g.rnd.IntN(8) == 0:
			n = longName(g.rnd)
		default:
			n = nameParts[g.rnd.IntN(len(nameParts))]
		}
		if i > 0 || g.names[n] {
			n = fmt.Sprintf("%s-%d", n, len(g.names))
			if len(n) > 255 {
				n = n[len(n)-255:]
			}
		}
		if !g.names[n] {
			g.names[n] = true
			return n
		}
	}
}

// longName is 101 to 250 bytes, ASCII or two-byte letters.
func longName(rnd *rand.Rand) string {
	n := 101 + rnd.IntN(150)
	unit := "long name "
	if rnd.IntN(2) == 0 {
		unit = "ü"
	}
	s := strings.Repeat(unit, n/len(unit)+1)
	for len(s) > n {
		s = s[:len(s)-len(unit)]
	}
	return s
}

func (g *gen) randTime() time.Time {
	// 2001 to 2033, any nanosecond.
	return time.Unix(1_000_000_000+g.rnd.Int64N(1_000_000_000), g.rnd.Int64N(1e9))
}

func (g *gen) mkdir(rel string) {
	g.must(os.Mkdir(g.abs(rel), 0o700))
	g.dirs = append(g.dirs, rel)
	g.files = append(g.files, rel)
	g.tree.Dirs++
	g.made++
	if g.times == nil {
		g.times, g.modes = map[string]time.Time{}, map[string]os.FileMode{}
	}
	g.times[rel] = g.randTime()
	g.modes[rel] = dirModes[g.rnd.IntN(len(dirModes))]
}

func (g *gen) file(dir, name string, size int64) {
	rel := join(dir, name)
	f, err := os.OpenFile(g.abs(rel), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	g.must(err)
	buf := make([]byte, 64<<10)
	for left := size; left > 0; {
		n := min(left, int64(len(buf)))
		g.data.Read(buf[:n])
		_, err := f.Write(buf[:n])
		g.must(err)
		left -= n
	}
	g.must(f.Close())
	g.must(os.Chmod(g.abs(rel), fileModes[g.rnd.IntN(len(fileModes))]))
	g.must(os.Chtimes(g.abs(rel), time.Time{}, g.randTime()))
	g.files = append(g.files, rel)
	g.tree.Files++
	g.tree.Bytes += size
	g.made++
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// fixed makes the cases every tree must have.
func (g *gen) fixed() {
	g.dirs = append(g.dirs, "")
	g.mkdir(g.uniqueName("empty dir"))
	g.file("", g.uniqueName("zero bytes"), 0)
	g.file("", g.uniqueName("日本語 with space.txt"), 123)
	deep := g.uniqueName("deep")
	g.mkdir(deep)
	p := deep
	for range 2 {
		p = join(p, g.uniqueName(strings.Repeat("d", 120)+fmt.Sprint(len(g.names))))
		g.mkdir(p)
	}
	g.file(p, g.uniqueName(strings.Repeat("f", 110)), 10) // path > 360 bytes
}

func (g *gen) dir(rel string, depth int) {
	n := 2 + g.rnd.IntN(6)
	for range n {
		if g.made >= g.opts.Entries {
			return
		}
		switch r := g.rnd.IntN(10); {
		case r < 3 && depth < g.opts.MaxDepth:
			child := join(rel, g.uniqueName(""))
			g.mkdir(child)
			g.dir(child, depth+1)
		case r < 4:
			g.file(rel, g.uniqueName(""), 0)
		default:
			g.file(rel, g.uniqueName(""), g.rnd.Int64N(g.opts.MaxFileSize+1))
		}
	}
}

func (g *gen) pickDir() string { return g.dirs[g.rnd.IntN(len(g.dirs))] }

// symlinks adds links to files, directories, other links, and dangling
// ones, each as a relative path from the link's directory.
func (g *gen) symlinks() {
	n := 4 + g.opts.Entries/8
	for i := range n {
		dir := g.pickDir()
		name := g.uniqueName("")
		var target string
		switch {
		case i == 0 || g.rnd.IntN(5) == 0:
			target = "dangling-" + fmt.Sprint(i)
			if g.rnd.IntN(2) == 0 {
				target = "no such dir/" + target
			}
		case i == 1 && len(g.links) > 0, g.rnd.IntN(5) == 0 && len(g.links) > 0:
			target = rel(dir, g.links[g.rnd.IntN(len(g.links))])
		default:
			target = rel(dir, g.files[g.rnd.IntN(len(g.files))])
		}
		link := join(dir, name)
		g.must(os.Symlink(target, g.abs(link)))
		g.must(Lchtimes(g.abs(link), g.randTime()))
		g.links = append(g.links, link)
		g.tree.Symlinks++
	}
}

// rel is the relative path from directory dir to target, both relative
// to the root and free of symlinks.
func rel(dir, target string) string {
	var d, t []string
	if dir != "" {
		d = strings.Split(dir, "/")
	}
	if target != "" {
		t = strings.Split(target, "/")
	}
	i := 0
	for i < len(d) && i < len(t) && d[i] == t[i] {
		i++
	}
	parts := slices.Repeat([]string{".."}, len(d)-i)
	parts = append(parts, t[i:]...)
	if len(parts) == 0 {
		return "."
	}
	return strings.Join(parts, "/")
}

// finish gives directories their modes and mtimes, deepest first.
func (g *gen) finish() {
	dirs := slices.Clone(g.dirs[1:])
	slices.Sort(dirs)
	slices.Reverse(dirs)
	for _, d := range dirs {
		g.must(os.Chmod(g.abs(d), g.modes[d]))
		g.must(os.Chtimes(g.abs(d), time.Time{}, g.times[d]))
	}
}
