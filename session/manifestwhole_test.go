package session

import (
	"bytes"
	"errors"
	"fmt"
)

// The whole-manifest forms of the streaming writer and reader, which the
// store itself no longer needs: the tests build and check manifests whole.

// encodeManifest is the stored form of m: zstd-compressed JSON (see
// writeManifest).
func encodeManifest(m *Manifest) ([]byte, error) {
	var b bytes.Buffer
	err := writeManifest(&b, m, func(yield func(*Entry) error) error {
		for i := range m.Entries {
			if err := yield(&m.Entries[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// parseManifest decodes and validates a manifest's JSON.
func parseManifest(js []byte) (*Manifest, error) {
	var entries []Entry
	m, err := readManifestJSON(bytes.NewReader(js), func(e *Entry) error {
		entries = append(entries, *e)
		return nil
	})
	if err != nil {
		if !errors.Is(err, ErrManifest) {
			err = fmt.Errorf("%w: %v", ErrManifest, err)
		}
		return nil, err
	}
	m.Entries = entries
	return m, nil
}
