package agent

import (
	"fmt"

	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// Result is what a Put or Get moved.
type Result struct {
	// Stats counts the tree: for Put what the host wrote (and the agent
	// extracted), for Get what the host extracted.
	archive.Stats
	// WireBytes is the payload of the data messages: the framed,
	// compressed tar stream.
	WireBytes int64
	// Entries is the sender's count from its trailer: Files + Dirs +
	// Symlinks.
	Entries int64
	// StaleStaging is how many stale staging directories of earlier,
	// killed transfers the receiver removed from the directory it
	// staged in (see archive.RemoveStaleStaging): the agent, for Put
	// and Restore, as it reports it; the host, for Get.
	StaleStaging int
	// PlacedInto: a Put with IntoIfDir found Dest a directory and placed
	// into it.
	PlacedInto bool
	// Frames counts the frame stream's blocks by how each was
	// compressed, as the host wrote (Put) or read (Get) them.
	Frames frame.Stats
}

// opPaths names an operation on paths for an error.
func opPaths(op string, paths []string) string {
	if len(paths) == 1 {
		return op + " " + paths[0]
	}
	return fmt.Sprintf("%s %d paths", op, len(paths))
}
