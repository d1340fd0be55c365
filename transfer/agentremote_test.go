package transfer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/agent/server"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// In agent mode the host's count of what it sends is a walk that runs
// beside the stream and is checked against the agent's trailer at the
// end: a count that differs is ErrShort, a count that fails is its own
// error, and a count that waits for the stream to start does not hold
// the stream up.
func TestAgentUploadCount(t *testing.T) {
	src := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(src, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	errWalk := errors.New("walk failed")
	tests := []struct {
		name  string
		count func(ctx context.Context, started <-chan struct{}) (int64, error)
		want  error
	}{
		{"right", func(context.Context, <-chan struct{}) (int64, error) { return 3, nil }, nil},
		{"one more", func(context.Context, <-chan struct{}) (int64, error) { return 4, nil }, ErrShort},
		{"one fewer", func(context.Context, <-chan struct{}) (int64, error) { return 2, nil }, ErrShort},
		{"failed", func(context.Context, <-chan struct{}) (int64, error) { return 0, errWalk }, errWalk},
		// Run before the stream, this count would wait until the
		// test's deadline.
		{"beside the stream", func(ctx context.Context, started <-chan struct{}) (int64, error) {
			select {
			case <-started:
				return 3, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			a := agentRemote{c: agenttest.InProcess(t, server.Config{Workspace: ws}), t: Target{Name: "test"}}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			started := make(chan struct{})
			fill := func(w *archive.Writer) error {
				close(started)
				return w.Add(ctx, src, ".")
			}
			count := func(ctx context.Context) (int64, error) { return tc.count(ctx, started) }
			st, err := a.Upload(ctx, UploadSpec{Dest: "out", Place: archive.PlaceNew, Count: count}, fill)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Upload: %v, want %v", err, tc.want)
			}
			if tc.want == nil && st.Files != 3 {
				t.Errorf("stats %+v, want 3 files", st)
			}
		})
	}
}
