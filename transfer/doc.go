// Package transfer moves files into and out of sandboxes over a
// relay.Execer: a streaming tar writer, the hardened extractor, compression
// framing, end-to-end digests and staged placement, in POSIX mode (the
// sandbox's own tar) and agent mode.
//
// Nothing is implemented yet; the package exists so that the layout of
// DESIGN.md holds from the start.
package transfer
