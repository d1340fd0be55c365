package wire

// StaleKey is the trailer metadata in which Put and Restore tell the host
// how many stale staging directories (archive.RemoveStaleStaging) the
// agent removed before it staged: the host logs it, as the agent's own
// log reaches nobody on success. A key in the trailer, not a field of the
// response, so that a failed call carries it too and the protocol's
// messages stay as they are.
const StaleKey = "ferry-stale-staging"
