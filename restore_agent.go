package ferry

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent"
)

// restoreSnapshot builds snapshot m at dest through the agent's Restore:
// the store's chunks travel as stored, and the agent decodes and checks
// each against its id before writing it. Compared with streaming the tree
// as tar (POSIX mode), the host neither decompresses nor recompresses
// anything, and the wire carries the store's zstd. A chunk the agent
// refuses is looked at again here, so that the error says whether the
// store or the channel damaged it.
func (a agentRemote) restoreSnapshot(ctx context.Context, st *session.Store, m *session.Manifest, dest string, place transfer.Placement) (CopyStats, error) {
	entries := make([]agent.RestoreEntry, 0, len(m.Entries)+1)
	if place == transfer.PlaceNew {
		entries = append(entries, agent.RestoreEntry{Path: ".", Kind: transfer.Dir, Mode: 0o700, MTime: m.Time})
	}
	for i := range m.Entries {
		e := &m.Entries[i]
		re := agent.RestoreEntry{Path: e.Path, Mode: e.Mode, MTime: e.ModTime(), Size: e.Size, Target: e.Target}
		switch e.Kind {
		case session.KindDir:
			re.Kind = transfer.Dir
		case session.KindSymlink:
			re.Kind = transfer.Symlink
		case session.KindFile:
			re.Kind = transfer.File
			re.Chunks = make([]agent.ChunkRef, len(e.Chunks))
			for j, c := range e.Chunks {
				re.Chunks[j] = agent.ChunkRef{ID: c.ID, Size: c.Size}
			}
		default:
			return CopyStats{}, fmt.Errorf("entry %q: %w: kind %q", e.Path, transfer.ErrUnsupported, e.Kind)
		}
		entries = append(entries, re)
	}
	staging := transfer.StagingPrefix + randomTag()
	stored := func(ctx context.Context, id [32]byte, buf []byte) ([]byte, error) {
		return st.ReadStored(ctx, id, buf)
	}
	res, err := a.c.Restore(ctx, agent.RestoreSpec{Dest: dest, Place: place, Staging: staging}, entries, stored)
	if err != nil {
		if a.c.Lost() {
			a.removeStaging(ctx, path.Join(transfer.StagingParent(dest, place), staging))
		}
		var ce *agent.ChunkError
		if errors.As(err, &ce) {
			return CopyStats{}, blameChunk(ctx, st, m, ce, err)
		}
		return CopyStats{}, err
	}
	return statsOf(res), nil
}

// blameChunk turns the agent's refusal of a chunk into the store's
// IntegrityError when the store's copy is damaged, and into a digest error
// (the channel, or the agent) when it is intact.
func blameChunk(ctx context.Context, st *session.Store, m *session.Manifest, ce *agent.ChunkError, err error) error {
	id := session.ID(ce.ID)
	_, rerr := st.ReadChunk(ctx, id, nil)
	switch {
	case errors.Is(rerr, session.ErrChunkCorrupt):
		return &session.IntegrityError{Key: m.Key, Seq: m.Seq, Corrupt: []session.ID{id}}
	case errors.Is(rerr, session.ErrChunkMissing):
		return &session.IntegrityError{Key: m.Key, Seq: m.Seq, Missing: []session.ID{id}}
	case rerr != nil:
		return errors.Join(err, rerr)
	}
	return fmt.Errorf("%w: the sandbox refused chunk %s of %q, which is intact in the store: %v", transfer.ErrDigest, id, ce.Path, err)
}
