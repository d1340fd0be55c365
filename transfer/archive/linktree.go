package archive

// LinkTree checks the symlinks of a tree known only by its entries, with
// the rules Extract applies to the symlinks it extracts: a target that is
// empty, absolute, over DefaultLimits.MaxPathLen or holds NUL is refused,
// and so is one that climbs above the root, lexically or through other
// symlinks of the tree, or that follows a chain over maxDepth links. A
// save checks what it is about to commit with it, so that it refuses what
// a restore would refuse (DESIGN.md: what a save commits, a restore of it
// accepts).
//
// Entries are given by cleaned slash-separated names relative to the root
// ("a/b"), each once; names not given as directories or symlinks count as
// files or missing, which resolution takes lexically, as Extract does.
// The zero value is ready to use. It holds the directories' and symlinks'
// names, not the files'.
type LinkTree struct {
	// IsDir, if set, says which names are directories in place of those
	// Dir records: for a caller that holds them already.
	IsDir func(name string) bool

	dirs  map[string]bool
	links map[string]string
	order []string
}

// Dir records the directory name.
func (t *LinkTree) Dir(name string) {
	if t.dirs == nil {
		t.dirs = map[string]bool{}
	}
	t.dirs[name] = true
}

// Symlink records the symlink name and checks its target lexically, as
// Extract checks a symlink entry as it arrives; the error is an
// *EntryError naming it, matching ErrLinkEscape or ErrLimit.
func (t *LinkTree) Symlink(name, target string) error {
	if err := CheckLinkTarget(name, target); err != nil {
		return err
	}
	if t.links == nil {
		t.links = map[string]string{}
	}
	t.links[name] = target
	t.order = append(t.order, name)
	return nil
}

// Check resolves every symlink recorded, in the order recorded, through
// the whole tree, as Extract does once its stream has ended; maxDepth 0
// is DefaultLimits.MaxLinkDepth. The error is an *EntryError naming the
// first symlink refused, matching ErrLinkEscape or ErrLimit.
func (t *LinkTree) Check(maxDepth int) error {
	if maxDepth <= 0 {
		maxDepth = DefaultLimits().MaxLinkDepth
	}
	look := func(p string) (node, string, error) {
		if target, ok := t.links[p]; ok {
			return nodeLink, target, nil
		}
		if t.IsDir != nil && t.IsDir(p) || t.dirs[p] {
			return nodeDir, "", nil
		}
		return nodeOther, "", nil
	}
	for _, name := range t.order {
		if err := resolve(name, t.links[name], maxDepth, look); err != nil {
			return &EntryError{Entry: name, Op: "symlink", Err: err}
		}
	}
	return nil
}

// CheckLinkTarget is LinkTree.Symlink's check of one symlink on its own,
// without recording it: for a caller that sees entries before the whole
// tree and would refuse an escaping target at once.
func CheckLinkTarget(name, target string) error {
	if err := checkLinkTarget(name, target, DefaultLimits().MaxPathLen); err != nil {
		return &EntryError{Entry: name, Op: "symlink", Err: err}
	}
	return nil
}
