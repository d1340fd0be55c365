package transfer

import "crypto/sha256"

// FileDigest is one regular file of an archive, as the sender wrote it or
// the receiver extracted it: its name (cleaned, slash-separated, without
// "./": the name ExtractOptions.Select is asked about), its size and the
// SHA-256 of its data. It is computed in the pass that copies the data,
// never by reading the file again. A sender's list and a receiver's list
// of the same stream are equal, in the same order: the end-to-end check
// of a trailer (DESIGN.md, "Rules everywhere").
type FileDigest struct {
	Name   string
	Size   int64
	SHA256 [sha256.Size]byte
}
