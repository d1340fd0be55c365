package ferry_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/transfer"

	"github.com/ferry-dev/ferry/session"

	"github.com/ferry-dev/ferry"
)

// TestSessionRestoreSendsStoredChunks: in agent mode a restore carries
// the store's compressed chunks as they are, so compressible transcripts
// cross the channel at a fraction of their size.
func TestSessionRestoreSendsStoredChunks(t *testing.T) {
	e := newEnv(t, transfer.ModeAgent)
	line := `{"type":"assistant","message":{"content":[{"type":"text","text":"reading the file"}]}}` + "\n"
	body := strings.Repeat(line, 20000)
	write(t, filepath.Join(e.root, "sess"), map[string]string{"t.jsonl": body, "sub/b.jsonl": body[:1000]})
	st, _ := newStore(t, nil)
	if _, err := ferry.SaveSession(ctx(t), e.sb, st, session.SaveSpec{Dir: "sess", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	rr, err := ferry.RestoreSession(ctx(t), e.sb, st, session.RestoreSpec{Key: "k", Dir: "dst"})
	if err != nil {
		t.Fatal(err)
	}
	if rr.Mode != "agent" || rr.Files != 2 || rr.Bytes != int64(len(body)+1000) || rr.WireBytes == 0 || rr.WireBytes > rr.Bytes/10 {
		t.Errorf("restore: %+v; want agent mode, 2 files, wire bytes under a tenth of %d", rr, len(body)+1000)
	}
	got, err := os.ReadFile(filepath.Join(e.root, "dst", "t.jsonl"))
	if err != nil || string(got) != body {
		t.Fatalf("restored t.jsonl: %d bytes, %v", len(got), err)
	}
}
