package archive

import "fmt"

// Kind is what a path on either side of a transfer is.
type Kind int

const (
	// Missing: nothing is there (or a parent cannot be searched).
	Missing Kind = iota
	Dir
	// File is a regular file.
	File
	// Symlink is a symbolic link (Stat), or a dangling one (StatFollow).
	Symlink
	// Other is anything else: a device, a fifo, a socket.
	Other
)

func (k Kind) String() string {
	switch k {
	case Missing:
		return "missing"
	case Dir:
		return "dir"
	case File:
		return "file"
	case Symlink:
		return "symlink"
	case Other:
		return "other"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}
