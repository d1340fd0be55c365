package archive

import (
	"fmt"
	"strings"
)

// rootName is the cleaned name of the archive's root ("./", ".", "").
const rootName = "."

// cleanName turns an entry's raw name into a slash-separated path relative
// to the extraction root: empty and "." components are dropped, a trailing
// slash too. It refuses what DESIGN.md refuses: NUL, an absolute name, a
// ".." component anywhere (even one that would stay inside, as in "a/../b":
// no legitimate archiver writes it, and refusing it keeps the check
// lexical). A name with no components left is rootName.
func cleanName(raw string, maxLen int) (string, error) {
	if len(raw) > maxLen {
		return "", fmt.Errorf("%w: name is %d bytes, at most %d", ErrLimit, len(raw), maxLen)
	}
	if raw == "" {
		return "", fmt.Errorf("%w: empty name", ErrUnsafePath)
	}
	if strings.IndexByte(raw, 0) >= 0 {
		return "", fmt.Errorf("%w: name contains NUL", ErrUnsafePath)
	}
	if raw[0] == '/' {
		return "", fmt.Errorf("%w: absolute name", ErrUnsafePath)
	}
	var b strings.Builder
	for c := range strings.SplitSeq(raw, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("%w: name has a \"..\" component", ErrUnsafePath)
		}
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(c)
	}
	if b.Len() == 0 {
		return rootName, nil
	}
	return b.String(), nil
}

// parentDir returns the directory part of a cleaned name: rootName for a
// top-level one.
func parentDir(name string) string {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return rootName
	}
	return name[:i]
}

// depth counts the components of a cleaned name; rootName has none.
func depth(name string) int {
	if name == rootName {
		return 0
	}
	return strings.Count(name, "/") + 1
}

// checkLinkTarget refuses a symlink target that is empty, absolute, too
// long, contains NUL, or, taken lexically from the directory holding the
// link, climbs above the root at any point. It does not follow other
// symlinks; resolveLinks does that once the tree is complete.
func checkLinkTarget(name, target string, maxLen int) error {
	if len(target) > maxLen {
		return fmt.Errorf("%w: link target is %d bytes, at most %d", ErrLimit, len(target), maxLen)
	}
	if target == "" {
		return fmt.Errorf("%w: empty link target", ErrLinkEscape)
	}
	if strings.IndexByte(target, 0) >= 0 {
		return fmt.Errorf("%w: link target contains NUL", ErrLinkEscape)
	}
	if target[0] == '/' {
		return fmt.Errorf("%w: absolute link target %q", ErrLinkEscape, clip(target))
	}
	d := depth(parentDir(name))
	for c := range strings.SplitSeq(target, "/") {
		switch c {
		case "", ".":
		case "..":
			d--
			if d < 0 {
				return fmt.Errorf("%w: link target %q leaves the destination", ErrLinkEscape, clip(target))
			}
		default:
			d++
		}
	}
	return nil
}
