package gateway

import (
	"strings"
	"testing"
)

// TestPetNamesValid cuts every pair of words as petName does: each result
// is a valid sandbox name, whatever the cut.
func TestPetNamesValid(t *testing.T) {
	for _, a := range petAdjectives {
		for _, n := range petNouns {
			name := strings.TrimRight((a + "-" + n)[:min(len(a)+1+len(n), maxNameLen)], "-")
			if err := validName(name); err != nil {
				t.Fatalf("%s-%s cuts to %q: %v", a, n, name, err)
			}
		}
	}
	for range 100 {
		if name := randomName(); validName(name) != nil || len(name) != 6 {
			t.Fatalf("fallback name %q", name)
		}
	}
}

func TestClampLimit(t *testing.T) {
	for _, tc := range []struct {
		in   uint32
		want int
	}{{0, 100}, {1, 1}, {500, 500}, {1000, 1000}, {1001, 1000}, {1 << 31, 1000}} {
		if got := clampLimit(tc.in); got != tc.want {
			t.Errorf("clampLimit(%d) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
