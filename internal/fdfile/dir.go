package fdfile

import "os"

// HeldDir keeps the last directory opened in Root open, for code that
// opens many files one openat(2) away from their directory (OpenAt)
// rather than through a walk of each path: a tar stream or a directory
// walk meets a directory's files together. The directory is opened
// through Root, so it is never outside it.
type HeldDir struct {
	Root *os.Root
	f    *os.File
	name string
}

// Open returns the directory name of Root, opening it unless it is the
// one held; it stays open until the next Open of another name, or Close.
func (h *HeldDir) Open(name string) (*os.File, error) {
	if h.f != nil && h.name == name {
		return h.f, nil
	}
	h.Close()
	f, err := h.Root.Open(name)
	if err != nil {
		return nil, err
	}
	h.f, h.name = f, name
	return f, nil
}

// Close closes the held directory, if any.
func (h *HeldDir) Close() {
	if h.f != nil {
		h.f.Close()
		h.f = nil
	}
}
