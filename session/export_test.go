package session

// The bounds of the requests in flight, for the tests that check them.
const (
	LookupParallel = lookupParallel
	UploadParallel = uploadParallel
)
