// Package posix is the sandbox side of transfers in POSIX mode: it moves raw
// tar streams into and out of a sandbox with nothing but the sandbox's own
// `sh`, `tar` (GNU or busybox, whichever PATH finds first) and the usual
// tools (find, mkdir, mv, rm, ls, touch, chmod), over one relay.Execer call
// per operation.
//
// Limitations first:
//   - Upload with PlaceInto merges entry by entry after a conflict check; a
//     failure part way through the moves (a full disk, a permission) leaves
//     the entries moved so far in place. PlaceNew and PlaceAs are one rename.
//   - The check that dest is absent and the final rename are two steps: a
//     process in the sandbox that creates dest in between wins, and the
//     upload's tree lands inside it (mv semantics).
//   - Both tars accept a stream that stops cleanly between two entries.
//     Upload refuses an archive without end-of-archive blocks on the host,
//     but only the entry count (wantEntries) catches a gateway that turns a
//     lost relay into EOF on the process's stdin at such a point.
//   - A lost relay leaves the remote process's fate unknown: after an error
//     that wraps relay.ErrRelayLost, dest may already be in place if the cut
//     came after the rename. Upload then removes its temp dir with a second,
//     best-effort exec; a temp dir that still survives (the second exec
//     failed too) is removed by the next Upload into the same directory
//     once the process that made it is gone.
//   - busybox tar restores no directory mtimes; GNU tar does.
//   - Download hands over the stream as the sandbox's tar wrote it: whatever
//     checks the entries (archive.Extract) runs on the host, and w may
//     have received part of a stream when Download fails.
//
// Every script is sent as `sh -c SCRIPT sh ARGS...`: paths and names travel
// as positional arguments, never as script text, and reach commands after
// "--" or as "./name". A login shell's banner on stdout or stderr is
// tolerated: control lines on stderr start with a tag fresh per call, and
// Download's stream starts after a marker made from that tag.
package posix
