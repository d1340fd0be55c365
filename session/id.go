package session

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// ID names a chunk: the SHA-256 of its plaintext.
type ID [sha256.Size]byte

// Hash returns the ID of data.
func Hash(data []byte) ID { return sha256.Sum256(data) }

// ParseID parses the 64 lower-case hex digits of an ID.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 2*len(id) {
		return id, fmt.Errorf("parse chunk id %q: want %d hex digits", s, 2*len(id))
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil || hex.EncodeToString(id[:]) != s {
		return id, fmt.Errorf("parse chunk id %q: not lower-case hex", s)
	}
	return id, nil
}

func (id ID) String() string { return hex.EncodeToString(id[:]) }

// MarshalText encodes id as hex.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText decodes hex from MarshalText.
func (id *ID) UnmarshalText(b []byte) error {
	p, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = p
	return nil
}

// CompareIDs orders IDs by their bytes, for slices.SortFunc: the one
// order every sorted list of IDs in a report or a request follows.
func CompareIDs(a, b ID) int { return bytes.Compare(a[:], b[:]) }
