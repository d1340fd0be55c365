package wire

import (
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
)

func TestRTTOf(t *testing.T) {
	cases := []struct {
		name string
		md   metadata.MD
		want time.Duration
	}{
		{"round trip", RTTHeader(42 * time.Millisecond), 42 * time.Millisecond},
		{"sub-millisecond", RTTHeader(730 * time.Microsecond), 730 * time.Microsecond},
		{"none", metadata.MD{}, 0},
		{"zero", metadata.Pairs(RTTKey, "0"), 0},
		{"negative", metadata.Pairs(RTTKey, "-5"), 0},
		{"not a number", metadata.Pairs(RTTKey, "40ms"), 0},
		{"over a minute", metadata.Pairs(RTTKey, "60000001"), 0},
		{"overflow", metadata.Pairs(RTTKey, "99999999999999999999"), 0},
		{"twice", metadata.Pairs(RTTKey, "10", RTTKey, "20"), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := RTTOf(c.md); got != c.want {
				t.Errorf("RTTOf(%v) = %v, want %v", c.md, got, c.want)
			}
		})
	}
}
