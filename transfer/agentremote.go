package transfer

import (
	"context"
	"fmt"
	"log/slog"
	"path"

	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
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

func (a agentRemote) Upload(ctx context.Context, fill Fill, dest string, place archive.Placement, want int64) (Stats, error) {
	staging := archive.StagingPrefix + archive.RandomTag()
	res, err := a.c.Put(ctx, agent.PutSpec{Dest: dest, Place: place, Compress: a.t.Compress, Staging: staging}, fill)
	LogStale(a.log, a.t.Name, "sandbox", dest, res.StaleStaging, nil)
	if err != nil {
		if a.c.Lost() {
			RemoveStaging(ctx, a.t, path.Join(archive.StagingParent(dest, place), staging))
		}
		return Stats{}, err
	}
	if res.Entries != want {
		// The tree changed while it was archived: what the agent checked
		// is what was sent, but it is not what was counted.
		return Stats{}, fmt.Errorf("%w: %d entries counted, %d sent", ErrShort, want, res.Entries)
	}
	return StatsOf(res), nil
}

func (a agentRemote) Download(ctx context.Context, dir string, names []string, local string, place archive.Placement, limits archive.Limits) (Stats, error) {
	res, err := a.c.Get(ctx, agent.GetSpec{Dir: dir, Names: names, Local: local, Place: place, Limits: limits, Compress: a.t.Compress})
	LogStale(a.log, a.t.Name, "host", local, res.StaleStaging, nil)
	if err != nil {
		return Stats{}, err
	}
	return StatsOf(res), nil
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
