// Package transfer moves trees between the host and a sandbox reached
// through an exec channel. [Open] connects to a sandbox in one of two
// modes and gives a [Remote], the contract both modes keep: through
// ferry's agent (package transfer/agent), one exec for the whole
// operation with compression and end-to-end digests, or through the
// sandbox's own sh and tar (package transfer/posix), an exec per call.
// [ModeAuto] uses the agent where it can run and falls back to POSIX mode
// where it cannot. [Upload] and [Download] give a Remote `cp -r`
// semantics.
//
// Whatever the mode, a failure callers branch on matches one sentinel
// under errors.Is: [ErrNoSource], [ErrNotDir], [ErrShort],
// [ErrAgentRequired], and the extractor's refusals in package
// transfer/archive, which also holds the tar writer, limits and
// placements both modes share.
package transfer
