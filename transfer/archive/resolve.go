package archive

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// resolveLink follows the symlink name through the staged tree the way the
// kernel would, and refuses it if resolution climbs above the root at any
// point, meets an absolute target, or follows more than maxDepth links.
// Components that do not exist (a dangling link, or one through a regular
// file) are taken lexically from there on: whatever is created there later
// must not turn the link into an escape either.
func resolveLink(root *os.Root, name string, maxDepth int) error {
	target, err := root.Readlink(name)
	if err != nil {
		return err
	}
	return resolve(name, target, maxDepth, func(p string) (node, string, error) {
		fi, err := root.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			return nodeOther, "", nil
		case err != nil:
			return 0, "", err
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := root.Readlink(p)
			return nodeLink, t, err
		case fi.IsDir():
			return nodeDir, "", nil
		}
		return nodeOther, "", nil
	})
}

// node is what resolve's look-up finds at a path.
type node int

const (
	nodeOther node = iota // missing, or not a directory nor a symlink
	nodeDir
	nodeLink
)

// resolve follows the symlink name, whose target is target, through a
// tree that look describes (a symlink's target with nodeLink), with
// resolveLink's rules: the one walk the extractor and LinkTree share, so
// that a save refuses exactly what a restore refuses.
func resolve(name, target string, maxDepth int, look func(p string) (node, string, error)) error {
	var stack []string // resolved components: real directories, then lexical ones
	if dir := parentDir(name); dir != rootName {
		stack = strings.Split(dir, "/")
	}
	pending := strings.Split(target, "/")
	if strings.HasPrefix(target, "/") {
		return fmt.Errorf("%w: absolute link target %q", ErrLinkEscape, clip(target))
	}
	followed := 1
	lexical := false
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return fmt.Errorf("%w: %q resolves outside the destination", ErrLinkEscape, clip(target))
			}
			stack = stack[:len(stack)-1]
			continue
		}
		stack = append(stack, c)
		if lexical {
			continue
		}
		p := strings.Join(stack, "/")
		kind, t, err := look(p)
		switch {
		case err != nil:
			return err
		case kind == nodeLink:
			followed++
			if followed > maxDepth {
				return fmt.Errorf("%w: more than %d symlinks in a chain", ErrLimit, maxDepth)
			}
			if strings.HasPrefix(t, "/") {
				return fmt.Errorf("%w: through %q to absolute %q", ErrLinkEscape, clip(p), clip(t))
			}
			stack = stack[:len(stack)-1]
			pending = append(strings.Split(t, "/"), pending...)
		case kind != nodeDir:
			lexical = true
		}
	}
	return nil
}
