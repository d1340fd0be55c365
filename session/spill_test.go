package session

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// randomEntries returns n distinct entries of every kind, in no order.
func randomEntries(rnd *rand.Rand, n int) []Entry {
	seen := map[string]bool{}
	var out []Entry
	for len(out) < n {
		var p strings.Builder
		for d := range 1 + rnd.IntN(3) {
			if d > 0 {
				p.WriteByte('/')
			}
			p.WriteString([]string{"a", "a-b", "a.b", "b", "ab", "a b", "é"}[rnd.IntN(7)])
			fmt.Fprintf(&p, "%d", rnd.IntN(40))
		}
		if seen[p.String()] {
			continue
		}
		seen[p.String()] = true
		e := Entry{Path: p.String(), Mode: 0o640, MTime: rnd.Int64() - 1<<62}
		switch rnd.IntN(3) {
		case 0:
			e.Kind = KindDir
		case 1:
			e.Kind = KindFile
			for range rnd.IntN(4) {
				c := ChunkRef{ID: Hash([]byte(p.String() + fmt.Sprint(len(e.Chunks)))), Size: 1 + rnd.Int64N(MaxChunkSize)}
				e.Chunks = append(e.Chunks, c)
				e.Size += c.Size
			}
		default:
			e.Kind, e.Target = KindSymlink, strings.Repeat("t", 1+rnd.IntN(300))
		}
		out = append(out, e)
	}
	return out
}

// TestSpill: entries come back whole and sorted, in byte order or in
// walk order, from memory alone and from many runs in the temp file,
// through several iterators at once; the temp file is never visible.
func TestSpill(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	rnd := rand.New(rand.NewPCG(1, 2))
	entries := randomEntries(rnd, 3000)
	orders := map[string]func(a, b []byte) int{"bytes": nil, "walk": archive.CompareWalk[[]byte]}
	for _, budget := range []int{1 << 30, 4 << 10, 100} {
		for name, cmp := range orders {
			t.Run(fmt.Sprintf("%s-%d", name, budget), func(t *testing.T) {
				old := spillBudget
				spillBudget = budget
				t.Cleanup(func() { spillBudget = old })
				s := &spill{cmp: cmp}
				defer s.close()
				for i := range entries {
					if err := s.add(&entries[i]); err != nil {
						t.Fatal(err)
					}
				}
				if left, _ := os.ReadDir(tmp); len(left) != 0 {
					t.Fatalf("%d runs, and the temp dir holds %v", len(s.runs), left)
				}
				if budget < 1<<30 && len(s.runs) < 2 {
					t.Fatalf("budget %d: %d runs", budget, len(s.runs))
				}
				if err := s.seal(); err != nil {
					t.Fatal(err)
				}
				want := slices.Clone(entries)
				slices.SortFunc(want, func(a, b Entry) int {
					if cmp == nil {
						return strings.Compare(a.Path, b.Path)
					}
					return archive.CompareWalk(a.Path, b.Path)
				})
				its := []*spillIter{s.iter(), s.iter()}
				for i := range want {
					for k, it := range its {
						rec, err := it.next()
						if err != nil || rec == nil {
							t.Fatalf("iterator %d, entry %d: %v, %v", k, i, rec, err)
						}
						var got Entry
						if err := decodeRecord(rec, &got); err != nil {
							t.Fatal(err)
						}
						if !reflect.DeepEqual(got, want[i]) {
							t.Fatalf("iterator %d, entry %d:\n got %+v\nwant %+v", k, i, got, want[i])
						}
					}
				}
				for _, it := range its {
					if rec, err := it.next(); rec != nil || err != nil {
						t.Fatalf("after the end: %q, %v", rec, err)
					}
				}
			})
		}
	}
}

// TestRecordDamaged: a cut or padded record is refused, never misread.
func TestRecordDamaged(t *testing.T) {
	for _, e := range randomEntries(rand.New(rand.NewPCG(3, 4)), 50) {
		rec, _ := appendRecord(nil, nil, &e)
		body := recordBody(rec, 0)
		var got Entry
		if err := decodeRecord(body, &got); err != nil || !reflect.DeepEqual(got, e) {
			t.Fatalf("%+v: decoded %+v, %v", e, got, err)
		}
		for cut := range len(body) {
			if err := decodeRecord(body[:cut], &got); err == nil {
				t.Fatalf("%q cut to %d bytes decoded as %+v", e.Path, cut, got)
			}
		}
		if err := decodeRecord(append(bytes.Clone(body), 0), &got); err == nil {
			t.Fatalf("%q with a byte more decoded", e.Path)
		}
	}
}
