package openshell

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
)

// IDCache keeps sandbox ids beyond one Client. A CLI runs each command in
// a process of its own, and a name one of them resolved need not cost the
// next a GetSandbox round trip. Keys name the gateway, the workspace and
// the sandbox.
//
// An id it returns may be stale (the sandbox was deleted, or recreated
// under its name). The gateway answers NOT_FOUND for it and the Client
// resolves the name again; ids are random UUIDs, never reused, so a stale
// one reaches no other sandbox.
type IDCache interface {
	LoadID(key string) (id string, ok bool)
	StoreID(key, id string)
	ForgetID(key string)
}

// IDDir is an IDCache in a directory: one file per key, named by the
// key's hash and holding the key and the id, replaced by rename so that
// processes sharing it read whole entries. It is a cache: an entry it
// cannot read or write is one it does not have.
type IDDir string

// maxIDLen bounds an id read back: a longer one is no entry.
const maxIDLen = 256

func (d IDDir) path(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(string(d), hex.EncodeToString(sum[:16]))
}

// LoadID implements IDCache.
func (d IDDir) LoadID(key string) (string, bool) {
	b, err := os.ReadFile(d.path(key))
	if err != nil || len(b) > len(key)+maxIDLen+2 {
		return "", false
	}
	k, id, ok := strings.Cut(strings.TrimSuffix(string(b), "\n"), "\n")
	if !ok || k != key || !validID(id) {
		return "", false
	}
	return id, true
}

// validID reports whether id is one an entry may hold: 1 to maxIDLen
// bytes, no space or control character.
func validID(id string) bool {
	return id != "" && len(id) <= maxIDLen && !strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r == 0x7f })
}

// StoreID implements IDCache.
func (d IDDir) StoreID(key, id string) {
	if strings.Contains(key, "\n") || !validID(id) {
		return
	}
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return
	}
	f, err := os.CreateTemp(string(d), ".id-*")
	if err != nil {
		return
	}
	_, err = f.WriteString(key + "\n" + id + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), d.path(key))
	}
	if err != nil {
		os.Remove(f.Name())
	}
}

// ForgetID implements IDCache.
func (d IDDir) ForgetID(key string) { os.Remove(d.path(key)) }
