//go:build !linux

package archive

// renameNoReplace renames oldpath to newpath unless newpath exists. Without
// renameat2 the check and the rename are two steps: a file that appears in
// between is replaced.
func renameNoReplace(oldpath, newpath string) error {
	return renameChecked(oldpath, newpath)
}
