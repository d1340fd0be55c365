package ferry

// MaxLiveRestarts is maxLiveRestarts, for the tests of the live copies.
const MaxLiveRestarts = maxLiveRestarts
