package gateway

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Records are kept in binary proto: a client may send policy fields this
// gateway's proto does not model, and only the binary form keeps them (as
// unknown fields) so that a restarted gateway returns the policy it was
// given. Records written as protojson by older gateways are still read,
// and replaced by the binary form at their next save.
const (
	recordExt     = ".pb"
	oldRecordExt  = ".json"
	recordTempExt = ".tmp"
)

// recordPath is where a sandbox's record is kept: named by id, so that
// two workspaces may hold one name.
func (r *registry) recordPath(pb *openshellv1.Sandbox, ext string) string {
	return filepath.Join(r.metaDir(), pb.GetMetadata().GetId()+ext)
}

func (r *registry) save(sb *sandbox) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(sb.pb)
	if err != nil {
		return fmt.Errorf("encode sandbox record: %w", err)
	}
	tmp := r.recordPath(sb.pb, recordExt+recordTempExt)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write sandbox record: %w", err)
	}
	if err := os.Rename(tmp, r.recordPath(sb.pb, recordExt)); err != nil {
		return fmt.Errorf("write sandbox record: %w", err)
	}
	// The binary record is in place; an old JSON one would only shadow a
	// later deletion.
	if err := os.Remove(r.recordPath(sb.pb, oldRecordExt)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove old sandbox record: %w", err)
	}
	return nil
}

// loaded is a record read at start and the file it was read from.
type loaded struct {
	pb   *openshellv1.Sandbox
	file string
}

// loadRecords reads every stored record: binary ones named by id, and
// JSON ones of older gateways, named by id or (before workspaces) by
// sandbox name. Where one sandbox has both forms the binary one is the
// newer, and the JSON one is removed.
func (r *registry) loadRecords() ([]loaded, error) {
	ents, err := os.ReadDir(r.metaDir())
	if err != nil {
		return nil, fmt.Errorf("read gateway state dir: %w", err)
	}
	var bin, old []loaded
	for _, e := range ents {
		var unmarshal func([]byte, proto.Message) error
		switch {
		case strings.HasSuffix(e.Name(), recordExt):
			unmarshal = proto.Unmarshal
		case strings.HasSuffix(e.Name(), oldRecordExt):
			unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal
		default:
			continue
		}
		b, err := os.ReadFile(filepath.Join(r.metaDir(), e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read sandbox record %s: %w", e.Name(), err)
		}
		pb := &openshellv1.Sandbox{}
		if err := unmarshal(b, pb); err != nil {
			return nil, fmt.Errorf("parse sandbox record %s: %w", e.Name(), err)
		}
		if strings.HasSuffix(e.Name(), recordExt) {
			bin = append(bin, loaded{pb, e.Name()})
		} else {
			old = append(old, loaded{pb, e.Name()})
		}
	}
	have := map[string]bool{}
	for _, l := range bin {
		have[l.pb.GetMetadata().GetId()] = true
	}
	for _, l := range old {
		if have[l.pb.GetMetadata().GetId()] {
			if err := os.Remove(filepath.Join(r.metaDir(), l.file)); err != nil {
				return nil, fmt.Errorf("remove old sandbox record: %w", err)
			}
			continue
		}
		bin = append(bin, l)
	}
	return bin, nil
}

// removeRecord deletes a sandbox's record in either form.
func (r *registry) removeRecord(pb *openshellv1.Sandbox) error {
	var first error
	for _, ext := range []string{recordExt, oldRecordExt} {
		if err := os.Remove(r.recordPath(pb, ext)); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
			first = fmt.Errorf("remove sandbox record: %w", err)
		}
	}
	return first
}
