package transfer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"

	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// agentRemote is agent mode.
type agentRemote struct {
	c   *agent.Client
	t   Target
	log *slog.Logger
}

func (a agentRemote) Target() Target       { return a.t }
func (a agentRemote) Mode() Mode           { return ModeAgent }
func (a agentRemote) Agent() *agent.Client { return a.c }
func (a agentRemote) Close() error         { return a.c.Close() }

func (a agentRemote) Stat(ctx context.Context, p string, follow bool) (archive.Kind, error) {
	return a.c.Stat(ctx, p, follow)
}

// statAll is Stat of several paths, following a final symlink, in one
// call (UploadSteps).
func (a agentRemote) statAll(ctx context.Context, paths []string) ([]archive.Kind, error) {
	es, err := a.c.StatAll(ctx, paths, true)
	if err != nil {
		return nil, err
	}
	out := make([]archive.Kind, len(es))
	for i, e := range es {
		out[i] = e.Kind
	}
	return out, nil
}

// intoIfDir: the agent takes UploadSpec.IntoIfDir.
func (agentRemote) intoIfDir() {}

func (a agentRemote) Upload(ctx context.Context, spec UploadSpec, fill Fill) (Stats, error) {
	staging := archive.StagingPrefix + archive.RandomTag()
	// The agent checks its own trailer, so the host's count is needed
	// only at the end: the walk runs beside the stream.
	type counted struct {
		n   int64
		err error
	}
	count := make(chan counted, 1)
	countCtx, stopCount := context.WithCancel(ctx)
	defer stopCount()
	if spec.Count != nil {
		go func() {
			n, err := spec.Count(countCtx)
			count <- counted{n, err}
		}()
	} else {
		count <- counted{spec.Entries, nil}
	}
	res, err := a.c.Put(ctx, agent.PutSpec{Dest: spec.Dest, Place: spec.Place, Compress: a.t.Compress, Staging: staging, IntoIfDir: spec.IntoIfDir}, fill)
	a.t.LogStale("sandbox", spec.Dest, res.StaleStaging, nil)
	if err != nil {
		stopCount()
		<-count
		// An agent that never answered (the Put waits for its hello)
		// staged nothing.
		if a.c.Lost() && !errors.Is(err, agent.ErrUnavailable) {
			at := []string{path.Join(archive.StagingParent(spec.Dest, spec.Place), staging)}
			if spec.IntoIfDir {
				// The agent may have placed into dest instead.
				at = append(at, path.Join(archive.StagingParent(spec.Dest, archive.PlaceInto), staging))
			}
			RemoveStaging(ctx, a.t, at...)
		}
		return Stats{}, err
	}
	want := <-count
	if want.err != nil {
		return Stats{}, want.err
	}
	if res.Entries != want.n {
		// The tree changed while it was archived: what the agent checked
		// is what was sent, but it is not what was counted.
		return Stats{}, fmt.Errorf("%w: %d entries counted, %d sent", ErrShort, want.n, res.Entries)
	}
	a.logFrames("upload", spec.Dest, res.Frames)
	st := StatsOf(res)
	if spec.IntoIfDir && spec.SrcIsDir && !res.PlacedInto && st.Dirs > 0 {
		st.Dirs--
	}
	return st, nil
}

func (a agentRemote) Download(ctx context.Context, spec DownloadSpec) (Stats, error) {
	res, err := a.c.Get(ctx, agent.GetSpec{Dir: spec.Dir, Names: spec.Names, Local: spec.Local, Place: spec.Place, Limits: spec.Limits, Compress: a.t.Compress, FilesOnly: spec.FilesOnly})
	a.t.LogStale("host", spec.Local, res.StaleStaging, nil)
	if err != nil {
		return Stats{}, err
	}
	a.logFrames("download", spec.Dir, res.Frames)
	return StatsOf(res), nil
}

// logFrames says, at debug level, how a transfer's blocks were
// compressed: what Auto chose for the link.
func (a agentRemote) logFrames(op, p string, f frame.Stats) {
	a.t.log().Debug("agent "+op+" framed", "sandbox", a.t.Name, "path", p, "plaintext", f.Plaintext, "wire", f.Wire,
		"stream_blocks", f.StreamBlocks, "zstd_blocks", f.ZstdBlocks, "s2_blocks", f.S2Blocks, "raw_blocks", f.RawBlocks)
}

func (a agentRemote) Present(ctx context.Context, dir string, names []string) ([]string, error) {
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = path.Join(dir, n)
	}
	es, err := a.c.StatAll(ctx, paths, false)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, e := range es {
		if e.Kind == archive.File {
			out = append(out, names[i])
		}
	}
	return out, nil
}
