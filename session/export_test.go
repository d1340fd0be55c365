package session

// The bounds of the requests in flight, for the tests that check them.
const (
	LookupParallel = lookupParallel
	UploadParallel = uploadParallel
)

// SetPackCacheBytes sets the bound of the packs a Store keeps in memory
// until the test ends.
func SetPackCacheBytes(t interface{ Cleanup(func()) }, n int64) {
	old := packCacheBytes
	packCacheBytes = n
	t.Cleanup(func() { packCacheBytes = old })
}

// SetSpillBudget sets the record bytes a save holds in memory before it
// spills them to its temp file, until the test ends.
func SetSpillBudget(t interface{ Cleanup(func()) }, n int) {
	old := spillBudget
	spillBudget = n
	t.Cleanup(func() { spillBudget = old })
}

// StreamPays is streamPays.
var StreamPays = streamPays
