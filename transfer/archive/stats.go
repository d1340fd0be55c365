package archive

// Stats counts what a transfer moved. Files counts regular files and hard
// links, Dirs directories other than the archive's root, Symlinks symbolic
// links; Bytes is the regular files' payload.
type Stats struct {
	Files, Dirs, Symlinks int64
	Bytes                 int64
}
