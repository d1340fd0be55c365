package session

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// FuzzAgentEntry feeds AgentSource.entry what a hostile agent may answer
// a scan with (the fuzz input is a ScanResponse on the wire): it never
// panics, refuses with ErrAgent or archive.ErrLimit, and what it accepts
// is what the manifest reader and a restore take: a valid entry within
// the restore's file size, no more chunks than cdc.Default() cuts, a record
// and a JSON form that read back the same, JSON no shorter than the
// save's early estimate.
func FuzzAgentEntry(f *testing.F) {
	sum := sha256.Sum256([]byte("x"))
	seeds := []*agentv1.ScanResponse{
		{Entries: []*agentv1.ScanEntry{
			{Path: "d", Kind: agentv1.Kind_KIND_DIR, Mode: 0o755},
			{Path: "d/f", Kind: agentv1.Kind_KIND_FILE, Mode: 0o644, Size: 1, Chunks: []*agentv1.ChunkInfo{{Id: sum[:], Size: 1}}},
			{Path: "d/l", Kind: agentv1.Kind_KIND_SYMLINK, Mode: 0o777, Target: "f"},
		}},
		{Entries: []*agentv1.ScanEntry{{Path: "bomb", Kind: agentv1.Kind_KIND_FILE, Size: 2, Chunks: []*agentv1.ChunkInfo{{Id: sum[:], Size: 1}, {Id: sum[:], Offset: 1, Size: 1}}}}},
		{Entries: []*agentv1.ScanEntry{{Path: "huge", Kind: agentv1.Kind_KIND_FILE, Size: 1 << 40}}},
		{Entries: []*agentv1.ScanEntry{{Path: "../x", Kind: agentv1.Kind_KIND_SYMLINK, Target: "/etc"}}},
		{Entries: []*agentv1.ScanEntry{{Path: "u", Kind: agentv1.Kind_KIND_FILE, Unchanged: true}}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var resp agentv1.ScanResponse
		if proto.Unmarshal(b, &resp) != nil {
			return
		}
		// Through a client, as a save takes them: what it cannot convert
		// (a kind or id outside the protocol) it refuses with
		// agent.ErrBadAnswer, which the save reports as ErrAgent.
		c := agenttest.Fake(t, &scanLiar{entries: resp.GetEntries()})
		a := &AgentSource{}
		w := &agentWalk{files: (*Parent)(nil).Files()}
		stop := errors.New("refused")
		err := c.Scan(context.Background(), ".", nil, agent.ScanOptions{}, func(se agent.ScanEntry) error {
			e, chunks, err := a.entry(se, w)
			if err != nil {
				if !errors.Is(err, ErrAgent) && !errors.Is(err, archive.ErrLimit) {
					t.Fatalf("entry %q: %v, want ErrAgent or archive.ErrLimit", se.Path, err)
				}
				return stop
			}
			if err := e.validate(); err != nil {
				t.Fatalf("accepted an entry the reader refuses: %v", err)
			}
			if err := checkSaveLimits(archive.DefaultLimits(), &e, 0, 0); err != nil {
				t.Fatalf("accepted an entry a restore refuses: %v", err)
			}
			if n := int64(len(e.Chunks)); n > maxFileChunks(e.Size) || len(chunks) != len(e.Chunks) {
				t.Fatalf("entry %q: %d chunks (%d reads) for %d bytes", e.Path, n, len(chunks), e.Size)
			}
			for i, c := range chunks {
				if ID(c.ID) != e.Chunks[i].ID || c.Size != e.Chunks[i].Size {
					t.Fatalf("entry %q: read %d is not chunk %d", e.Path, i, i)
				}
			}
			rec, _ := appendRecord(nil, nil, &e)
			var back Entry
			if err := decodeRecord(recordBody(rec, 0), &back); err != nil || !reflect.DeepEqual(back, e) {
				t.Fatalf("entry %q: record reads back as %+v, %v", e.Path, back, err)
			}
			js, err := json.Marshal(&e)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(js))+1 < minEntryJSON(&e) {
				t.Fatalf("entry %q: %d bytes of JSON, the save's estimate says at least %d", e.Path, len(js), minEntryJSON(&e))
			}
			var again Entry
			if err := json.Unmarshal(js, &again); err != nil || again.validate() != nil || !reflect.DeepEqual(again, e) {
				t.Fatalf("entry %q: JSON reads back as %+v, %v", e.Path, again, err)
			}
			return nil
		})
		if err != nil && err != stop && !errors.Is(err, agent.ErrBadAnswer) {
			t.Fatalf("scan: %v, want a refusal of the entry or agent.ErrBadAnswer", err)
		}
	})
}

// scanLiar answers a scan with entries, whatever was asked.
type scanLiar struct {
	agentv1.UnimplementedAgentServer
	entries []*agentv1.ScanEntry
}

func (l *scanLiar) ScanStream(s agentv1.Agent_ScanStreamServer) error {
	return s.Send(&agentv1.ScanResponse{Entries: l.entries})
}
