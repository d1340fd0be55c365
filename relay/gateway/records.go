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

func (r *registry) recordPath(name, ext string) string {
	return filepath.Join(r.metaDir(), name+ext)
}

func (r *registry) save(sb *sandbox) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(sb.pb)
	if err != nil {
		return fmt.Errorf("encode sandbox record: %w", err)
	}
	name := sb.pb.GetMetadata().GetName()
	tmp := r.recordPath(name, recordExt+recordTempExt)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write sandbox record: %w", err)
	}
	if err := os.Rename(tmp, r.recordPath(name, recordExt)); err != nil {
		return fmt.Errorf("write sandbox record: %w", err)
	}
	// The binary record is in place; an old JSON one would only shadow a
	// later deletion.
	if err := os.Remove(r.recordPath(name, oldRecordExt)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove old sandbox record: %w", err)
	}
	return nil
}

// loadRecords reads every stored record. Where a name has both forms the
// binary one is the newer.
func (r *registry) loadRecords() ([]*openshellv1.Sandbox, error) {
	ents, err := os.ReadDir(r.metaDir())
	if err != nil {
		return nil, fmt.Errorf("read gateway state dir: %w", err)
	}
	have := map[string]bool{}
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), recordExt); ok {
			have[name] = true
		}
	}
	var out []*openshellv1.Sandbox
	for _, e := range ents {
		var unmarshal func([]byte, proto.Message) error
		name, ok := strings.CutSuffix(e.Name(), recordExt)
		switch {
		case ok:
			unmarshal = proto.Unmarshal
		case strings.HasSuffix(e.Name(), oldRecordExt):
			name = strings.TrimSuffix(e.Name(), oldRecordExt)
			if have[name] {
				continue
			}
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
		out = append(out, pb)
	}
	return out, nil
}

// removeRecord deletes name's record in either form.
func (r *registry) removeRecord(name string) error {
	var first error
	for _, ext := range []string{recordExt, oldRecordExt} {
		if err := os.Remove(r.recordPath(name, ext)); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
			first = fmt.Errorf("remove sandbox record: %w", err)
		}
	}
	return first
}
