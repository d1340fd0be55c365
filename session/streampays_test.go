package session_test

import (
	"testing"
	"time"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// TestStreamPays: a restore streams its chunks with --compress zstd, and
// with auto only over a link of a WAN's round trip.
func TestStreamPays(t *testing.T) {
	for _, tc := range []struct {
		mode frame.Mode
		rtt  time.Duration
		want bool
	}{
		{frame.Auto, 100 * time.Microsecond, false}, // loopback
		{frame.Auto, time.Millisecond, false},       // lan
		{frame.Auto, 40 * time.Millisecond, true},   // region
		{frame.Zstd, 0, true},
		{frame.None, time.Second, false},
		{frame.S2, time.Second, false},
	} {
		if got := session.StreamPays(tc.mode, tc.rtt); got != tc.want {
			t.Errorf("streamPays(%v, %v) = %v, want %v", tc.mode, tc.rtt, got, tc.want)
		}
	}
}
