package session

import (
	"bytes"
	"testing"
)

// FuzzParsePack feeds parsePackTrailer hostile packs: it must not panic,
// and what it accepts must lie inside the pack's data and encode back to
// the same trailer. The seeds are in testdata/fuzz/FuzzParsePack.
func FuzzParsePack(f *testing.F) {
	pack, _ := sealPack([]byte("0123456789abcdefghij"), []packEntry{{ID: ID{1}, Off: 0, Len: 10}, {ID: ID{2}, Off: 10, Len: 10}})
	f.Add(pack)
	f.Add(pack[:len(pack)-1])
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := parsePackTrailer(data)
		if err != nil {
			return
		}
		n, _ := packTrailerSize(data[len(data)-packFooterSize:], int64(len(data)))
		end := int64(len(data)) - packFooterSize - n
		for _, e := range es {
			if int64(e.Off)+int64(e.Len) > end || e.Len == 0 {
				t.Fatalf("entry %+v outside %d data bytes", e, end)
			}
		}
		if body := appendIndex(nil, es); !bytes.Equal(body, data[end:int64(len(data))-packFooterSize]) {
			t.Fatal("accepted trailer does not encode back to itself")
		}
	})
}

// FuzzParseIndex feeds parseIndex hostile index objects.
func FuzzParseIndex(f *testing.F) {
	f.Add(appendIndex(nil, []packEntry{{ID: ID{1}, Off: 5, Len: 10}}))
	f.Add([]byte(indexMagic + "\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := parseIndex(data, MaxPackSize)
		if err != nil {
			return
		}
		seen := map[ID]bool{}
		for _, e := range es {
			if seen[e.ID] || e.Len == 0 || e.Len > maxStoredChunk || int64(e.Off)+int64(e.Len) > MaxPackSize {
				t.Fatalf("accepted entry %+v", e)
			}
			seen[e.ID] = true
		}
		if !bytes.Equal(appendIndex(nil, es), data) {
			t.Fatal("accepted index does not encode back to itself")
		}
	})
}

// TestSealPack: a sealed pack parses back to its entries and hashes to
// its name, and CheckPackObject refuses it under another name.
func TestSealPack(t *testing.T) {
	es := []packEntry{{ID: ID{1}, Off: 0, Len: 3}, {ID: ID{2}, Off: 3, Len: 4}}
	pack, id := sealPack([]byte("abcdefg"), es)
	got, err := checkPack(id, pack)
	if err != nil || len(got) != 2 || got[0] != es[0] || got[1] != es[1] {
		t.Fatalf("checkPack = %+v, %v", got, err)
	}
	if err := CheckPackObject(ID{9}, pack); err == nil {
		t.Fatal("a pack under another name passed")
	}
	for _, bad := range [][]packEntry{
		{{ID: ID{1}, Off: 5, Len: 3}},                              // past the data
		{{ID: ID{1}, Off: 0, Len: 0}},                              // empty
		{{ID: ID{1}, Off: 0, Len: 3}, {ID: ID{1}, Off: 3, Len: 4}}, // twice
	} {
		p, _ := sealPack([]byte("abcdefg"), bad)
		if _, err := parsePackTrailer(p); err == nil {
			t.Errorf("trailer %+v accepted", bad)
		}
	}
}
