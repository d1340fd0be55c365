package session_test

import (
	"context"
	"errors"
	"testing"

	"github.com/spf13/afero"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer"
)

// TestSaveViaRemoteLater: SaveVia takes the key's lock and reads the
// store before it waits for the remote, and a remote that fails ends the
// save with that error, unwrapped, nothing committed.
func TestSaveViaRemoteLater(t *testing.T) {
	s, fsys := memStore(t)
	errDial := errors.New("dial failed")
	var lockHeld bool
	remote := func(context.Context) (transfer.Remote, error) {
		// The store's part ran first: the key's save lock is there.
		matches, err := afero.Glob(fsys, "locks/save/*")
		lockHeld = err == nil && len(matches) > 0
		return nil, errDial
	}
	_, err := s.SaveVia(context.Background(), "box", remote, session.SaveSpec{Dir: "sess", Key: "k"})
	if err != errDial {
		t.Fatalf("err = %v, want the remote's own error", err)
	}
	if !lockHeld {
		t.Error("the remote was waited for before the save's lock was taken")
	}
	if _, err := s.Load(context.Background(), "k", 0); !errors.Is(err, session.ErrNoSnapshot) {
		t.Fatalf("load after the failed save: %v, want ErrNoSnapshot", err)
	}
}
