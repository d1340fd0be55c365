package main

import (
	"context"
	"fmt"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/session"
)

// verifyResult is `ferry session verify --json`'s object: the report,
// and with --repair how many missing chunks were stored again and how.
type verifyResult struct {
	*session.VerifyReport
	Repaired *int                  `json:"repaired,omitempty"`
	Repair   *session.RepairResult `json:"repair,omitempty"`
}

// repairChunks stores the chunks rep lists missing again from the
// sandbox directory from (SANDBOX:DIR), says how many on stderr (without
// --json, whose object says it), and verifies key again. With none
// missing it reaches no sandbox and returns rep as it is.
func (g *globals) repairChunks(ctx context.Context, s streams, st *session.Store, key, from string, rep *session.VerifyReport) (*session.VerifyReport, *session.RepairResult, error) {
	if len(rep.Missing) == 0 {
		return rep, &session.RepairResult{Restored: []session.ID{}, Missing: []session.ID{}}, nil
	}
	box, dir, err := sessionTarget(from)
	if err != nil {
		return nil, nil, err
	}
	x, closeFn, err := g.execer()
	if err != nil {
		return nil, nil, err
	}
	defer closeFn()
	sb, err := g.sandbox(x, box)
	if err != nil {
		return nil, nil, err
	}
	res, err := ferry.RepairSession(ctx, sb, st, dir, rep.Missing)
	if err != nil {
		return nil, nil, err
	}
	if !g.quiet && !g.json {
		for _, name := range res.RemovedIndexes {
			fmt.Fprintf(s.err, "removed %s: its pack is gone, its chunks are stored again\n", name)
		}
		fmt.Fprintf(s.err, "restored %d of %d missing chunk(s) from %s\n", len(res.Restored), res.Wanted, from)
	}
	if rep, err = st.Verify(ctx, key); err != nil {
		return nil, nil, err
	}
	return rep, &res, nil
}
