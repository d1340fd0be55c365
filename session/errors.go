package session

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

var (
	// ErrConflict matches the error of a Save that lost the race to
	// commit: another save committed the same sequence number of the key
	// first. The losing save committed nothing. See [ConflictError].
	ErrConflict = errors.New("session: conflict")
	// ErrNoSnapshot matches asking for a key with no snapshot, or for a
	// sequence number the key does not have.
	ErrNoSnapshot = errors.New("session: no such snapshot")
	// ErrNotEmpty matches a Restore into a non-empty directory without
	// Replace.
	ErrNotEmpty = errors.New("session: target not empty")
	// ErrChunkMissing and ErrChunkCorrupt match an [IntegrityError] that
	// holds at least one missing, or corrupt, chunk.
	ErrChunkMissing = errors.New("session: chunk missing")
	ErrChunkCorrupt = errors.New("session: chunk corrupt")
	// ErrManifest matches a manifest that does not decode or validate.
	ErrManifest = errors.New("session: invalid manifest")
	// ErrInvalidKey matches a key that is not a valid store name.
	ErrInvalidKey = errors.New("session: invalid key")
	// ErrNoStore matches opening a store that does not exist (a local
	// directory, an S3 bucket) with a backend's constructor that does not
	// create one.
	ErrNoStore = errors.New("session: no such store")
)

// ConflictError is the error of a Save whose commit lost: the snapshot
// Key/Seq had been committed by someone else.
type ConflictError struct {
	Key string
	Seq int64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("session: commit snapshot %d of key %s: committed concurrently by another save", e.Seq, e.Key)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// IntegrityError lists the chunks a snapshot needs that are missing from
// the store or do not hash to their ID.
type IntegrityError struct {
	Key              string
	Seq              int64
	Missing, Corrupt []ID
	// Packs are the pack and index objects at fault, when the chunks are
	// in packs: missing or damaged, or disagreeing with each other.
	Packs []string
}

// addPack records the object name at fault, once.
func (e *IntegrityError) addPack(name string) {
	if !slices.Contains(e.Packs, name) {
		e.Packs = append(e.Packs, name)
	}
}

// note records err's chunk id as missing or corrupt, and its pack; it
// reports false for an error that is neither (a failing backend).
func (e *IntegrityError) note(id ID, err error) bool {
	switch {
	case errors.Is(err, ErrChunkMissing):
		e.Missing = append(e.Missing, id)
	case errors.Is(err, ErrChunkCorrupt):
		e.Corrupt = append(e.Corrupt, id)
	default:
		return false
	}
	var pe *PackError
	if errors.As(err, &pe) {
		e.addPack(pe.Object)
	}
	return true
}

// blameIndexes adds to a list of missing chunks the index objects of s
// that do not parse: the chunks may be in their packs.
func (e *IntegrityError) blameIndexes(s *Store) {
	if len(e.Missing) == 0 {
		return
	}
	s.view.mu.Lock()
	defer s.view.mu.Unlock()
	for id := range s.view.badIndex {
		e.addPack(indexName(id))
	}
}

// orNil returns e if it lists damage, else nil.
func (e *IntegrityError) orNil() error {
	slices.SortFunc(e.Missing, CompareIDs)
	slices.SortFunc(e.Corrupt, CompareIDs)
	slices.Sort(e.Packs)
	if len(e.Missing)+len(e.Corrupt) > 0 {
		return e
	}
	return nil
}

func (e *IntegrityError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "session: snapshot %d of key %s is damaged:", e.Seq, e.Key)
	list := func(what string, ids []ID) {
		if len(ids) == 0 {
			return
		}
		fmt.Fprintf(&b, " %d %s chunk(s)", len(ids), what)
		for i, id := range ids {
			if i == 5 {
				b.WriteString(" ...")
				break
			}
			b.WriteString(" " + id.String())
		}
	}
	list("missing", e.Missing)
	list("corrupt", e.Corrupt)
	if len(e.Packs) > 0 {
		fmt.Fprintf(&b, " (in %s)", strings.Join(e.Packs, ", "))
	}
	return b.String()
}

// Is matches ErrChunkMissing and ErrChunkCorrupt.
func (e *IntegrityError) Is(target error) bool {
	return (target == ErrChunkMissing && len(e.Missing) > 0) || (target == ErrChunkCorrupt && len(e.Corrupt) > 0)
}
