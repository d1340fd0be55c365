package archive

// CompareWalk orders slash-separated relative paths as fs.WalkDir visits
// them: component by component, each compared byte-wise, so that a
// directory comes before its contents and its contents before its next
// sibling ("a", "a/x", "a-b"; byte order puts "a-b" before "a/x"). It
// returns -1, 0 or +1 as a sorts before, equal to or after b. It takes
// paths as strings or as byte slices.
//
// It is byte order with '/' counted below every other byte: a component
// that is a prefix of the other one ends first. Paths must not hold NUL,
// which would sort with '/'.
func CompareWalk[T ~string | ~[]byte](a, b T) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		switch {
		case x == '/':
			return -1
		case y == '/':
			return +1
		case x < y:
			return -1
		}
		return +1
	}
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return +1
	}
	return 0
}
