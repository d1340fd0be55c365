package ferry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// SessionRepairResult is what RepairSession stored again, in the shape
// `ferry session verify --repair --json` prints under "repair".
type SessionRepairResult struct {
	Wanted   int          `json:"wanted"`   // chunks asked for
	Restored []session.ID `json:"restored"` // stored again, sorted
	Missing  []session.ID `json:"missing"`  // not found in the directory, sorted
	// RemovedIndexes are index objects of lost packs that the repair
	// removed (see session.Store.RepairChunks).
	RemovedIndexes []string `json:"removed_indexes,omitempty"`
	Bytes          int64    `json:"bytes"` // plaintext of the chunks restored
	WireBytes      int64    `json:"wire_bytes"`
	Seconds        float64  `json:"seconds"`
	Mode           string   `json:"mode"`
}

// RepairSession stores again in st the chunks missing lists (those
// st.Verify reports missing) from the directory remoteDir of the sandbox,
// which still holds the files they were cut from: a session directory
// saved before, or a copy of it. It commits no snapshot, and stores only
// chunks whose content hashes to an id asked for, whatever the sandbox
// sends (see session.Store.RepairChunks). In agent mode the agent chunks
// the directory next to the data and only the wanted chunks cross the
// relay; POSIX mode downloads the whole directory into a private temp
// directory on this host and chunks it here, as SaveSession does.
//
// A chunk the directory no longer holds (its file changed or went since
// the save) is reported in the result's Missing, not as an error. With
// missing empty, RepairSession does not reach the sandbox.
func RepairSession(ctx context.Context, sb Sandbox, st *session.Store, remoteDir string, missing []session.ID) (SessionRepairResult, error) {
	start := time.Now()
	if st == nil {
		return SessionRepairResult{}, errors.New("repair session: nil store")
	}
	missing = sortedIDs(missing)
	res := SessionRepairResult{Wanted: len(missing), Restored: []session.ID{}, Missing: missing}
	if len(missing) == 0 {
		return res, nil
	}
	r, err := sb.open(ctx)
	if err != nil {
		return res, err
	}
	defer r.Close()
	res.Mode = r.Mode().String()
	kind, err := r.Stat(ctx, remoteDir, true)
	if err != nil {
		return res, fmt.Errorf("repair session: stat %s:%s: %w", sb.Name, remoteDir, err)
	}
	switch kind {
	case archive.Dir:
	case archive.Missing:
		return res, fmt.Errorf("repair session from %s:%s: %w", sb.Name, remoteDir, ErrNoSource)
	default:
		return res, fmt.Errorf("repair session from %s:%s: %w", sb.Name, remoteDir, ErrNotDir)
	}
	src, wire := sessionSource(sb, r, remoteDir)
	rep, err := st.RepairChunks(ctx, missing, src)
	res.WireBytes = wire()
	if rep != nil {
		res.Restored, res.Missing = append(res.Restored, rep.Restored...), append([]session.ID{}, rep.Missing...)
		res.RemovedIndexes, res.Bytes = rep.RemovedIndexes, rep.Bytes
	}
	if err != nil {
		return res, fmt.Errorf("repair session from %s:%s: %w", sb.Name, remoteDir, err)
	}
	if err := r.Close(); err != nil {
		// The chunks are stored: the channel failed after.
		return res, fmt.Errorf("repair session from %s:%s: %d chunk(s) stored, then: %w", sb.Name, remoteDir, len(res.Restored), err)
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// sortedIDs returns ids sorted, without duplicates, never nil.
func sortedIDs(ids []session.ID) []session.ID {
	out := append([]session.ID{}, ids...)
	slices.SortFunc(out, session.CompareIDs)
	return slices.Compact(out)
}
