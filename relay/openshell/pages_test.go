package openshell

import (
	"context"
	"errors"
	"testing"
)

// TestListAll: a listing ends at the first short page; a gateway that
// answers full pages without end, or a page longer than asked, is
// ErrListTooLong, not a client that fetches forever.
func TestListAll(t *testing.T) {
	id := func(i int) int { return i }
	for _, tc := range []struct {
		name  string
		page  func(off uint32) []int
		want  int
		err   error
		calls int
	}{
		{"short page ends it", func(off uint32) []int {
			if off == 2*listPage {
				return make([]int, 7)
			}
			return make([]int, listPage)
		}, 2*listPage + 7, nil, 3},
		{"empty", func(uint32) []int { return nil }, 0, nil, 1},
		{"endless", func(uint32) []int { return make([]int, listPage) }, 0, ErrListTooLong, maxListed/listPage + 1},
		{"page over the limit", func(uint32) []int { return make([]int, listPage+1) }, 0, ErrListTooLong, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			got, err := listAll(context.Background(), "things", func(_ context.Context, off uint32) ([]int, error) {
				calls++
				return tc.page(off), nil
			}, id)
			if !errors.Is(err, tc.err) || len(got) != tc.want || calls != tc.calls {
				t.Fatalf("%d listed, %d calls, err %v; want %d, %d calls, %v", len(got), calls, err, tc.want, tc.calls, tc.err)
			}
		})
	}
}
