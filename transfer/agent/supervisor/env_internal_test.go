package supervisor

import (
	"slices"
	"testing"

	"github.com/ferry-dev/ferry/relay"
)

// TestDetachedEnv: the supervisor, and so the command it detaches, drops
// the mark its exec's client stops processes by (relay.MarkVar), and
// nothing else: a cancelled connection must not end a detached run.
func TestDetachedEnv(t *testing.T) {
	in := []string{"PATH=/bin", relay.MarkVar + "=0123", "X_" + relay.MarkVar + "=kept", relay.MarkVar + "X=kept", "HOME=/h"}
	want := []string{"PATH=/bin", "X_" + relay.MarkVar + "=kept", relay.MarkVar + "X=kept", "HOME=/h"}
	if got := detachedEnv(in); !slices.Equal(got, want) {
		t.Fatalf("detachedEnv(%q) = %q, want %q", in, got, want)
	}
}
