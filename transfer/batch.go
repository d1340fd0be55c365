package transfer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// Step is one upload of UploadSteps: the sandbox paths whose kinds it
// depends on, and the plan those kinds give.
type Step struct {
	// Stat are the sandbox paths Plan asks the kinds of (following a
	// final symlink, as for a copy's destination).
	Stat []string
	// Plan decides where the step's items land from the kinds of its
	// Stat paths as they are when the step runs: what the steps before
	// it placed is counted in. Name is the step in errors ("upload to
	// box:dst").
	Plan func(kind func(string) (archive.Kind, error)) (Placement, error)
	Name string

	// auto, when set, is the step's placement decided in the sandbox
	// (autoPlan): no stat at all.
	auto func(Remote) (Placement, bool)
}

// Placement is where a step's items go: one Put's destination,
// placement and top-level entries.
type Placement struct {
	Dest  string
	Place archive.Placement
	Items []Item
	// IntoIfDir and SrcIsDir are UploadSpec's: the agent decides into
	// or as (autoPlan).
	IntoIfDir, SrcIsDir bool
}

// StepError is the failure of UploadSteps' steps at Steps (indexes), in
// one upload; the earliest failure is the one returned.
type StepError struct {
	Steps []int
	Err   error
}

func (e *StepError) Error() string { return e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }

// UploadStep is the Step of Upload(ctx, r, srcs, dst), its local sources
// looked at now.
func UploadStep(name string, srcs []string, dst string) (Step, error) {
	sources, err := lstatSources(srcs)
	if err != nil {
		return Step{}, err
	}
	return Step{
		Stat: uploadStats(dst),
		Plan: func(kind func(string) (archive.Kind, error)) (Placement, error) {
			return planUpload(name, sources, dst, kind)
		},
		Name: uploadLabel(name, dst),
		auto: func(r Remote) (Placement, bool) { return autoPlan(r, sources, dst) },
	}, nil
}

// statAller is a Remote that stats several paths in one call (agent
// mode) and takes concurrent calls.
type statAller interface {
	statAll(ctx context.Context, paths []string) ([]archive.Kind, error)
}

// UploadSteps runs steps as if one after the other, each planned against
// the sandbox as the steps before it left it, in fewer round trips: in
// agent mode the paths of every step are statted in one call, what each
// step's upload does to them is worked out rather than asked again, a
// step that lands in the same directory as an earlier one joins its Put,
// and Puts to unrelated paths run at once. A path the uploads before it
// changed in a way not worked out (inside an uploaded tree) is statted
// again once they are done. In POSIX mode the steps run one by one.
//
// Limitation: paths are compared as strings, so two spellings of one
// directory (a symlink in the sandbox, a relative and an absolute path)
// are taken for two; the steps are then planned against the kinds of
// before the earlier uploads, as a concurrent writer in the sandbox
// would make them.
func UploadSteps(ctx context.Context, r Remote, steps []Step) (Stats, error) {
	sa, ok := r.(statAller)
	if !ok {
		return uploadOneByOne(ctx, r, steps)
	}
	if puts, ok := autoPuts(r, steps); ok {
		return runPuts(ctx, r, puts)
	}
	var paths []string
	seen := map[string]bool{}
	for _, s := range steps {
		for _, p := range s.Stat {
			if !seen[p] {
				seen[p] = true
				paths = append(paths, p)
			}
		}
	}
	m := &model{}
	if len(paths) > 0 {
		kinds, err := sa.statAll(ctx, paths)
		if err != nil {
			return Stats{}, &StepError{Steps: []int{0}, Err: fmt.Errorf("upload: %w", err)}
		}
		m.known(paths, kinds)
	}
	var puts []*put
	for i, s := range steps {
		var unknown []string
		for _, p := range s.Stat {
			if _, ok := m.kind(p); !ok {
				unknown = append(unknown, p)
			}
		}
		if len(unknown) > 0 {
			// An earlier upload may have made these anything: once
			// everything before is in place, the rest is planned again,
			// asking for what is not known.
			st, err := runPuts(ctx, r, puts)
			if err != nil {
				return st, err
			}
			rest, err := UploadSteps(ctx, withKinds{r, m}, steps[i:])
			st.add(rest)
			var se *StepError
			if errors.As(err, &se) {
				for j := range se.Steps {
					se.Steps[j] += i
				}
			}
			return st, err
		}
		pl, err := s.Plan(func(p string) (archive.Kind, error) {
			k, _ := m.kind(p)
			return k, nil
		})
		if err != nil {
			if _, err2 := runPuts(ctx, r, puts); err2 != nil {
				return Stats{}, err2
			}
			return Stats{}, &StepError{Steps: []int{i}, Err: err}
		}
		m.placed(pl)
		puts = join(puts, pl, i, s.Name)
	}
	return runPuts(ctx, r, puts)
}

// autoPuts are steps' Puts when each can be placed by the agent
// (autoPlan) and no two touch related paths: then nothing is statted and
// the Puts run at once. Related steps depend on what the ones before
// them placed, which is not known without a stat.
func autoPuts(r Remote, steps []Step) ([]*put, bool) {
	var puts []*put
	for i, s := range steps {
		if s.auto == nil {
			return nil, false
		}
		pl, ok := s.auto(r)
		if !ok {
			return nil, false
		}
		for _, q := range puts {
			if related(q.Dest, pl.Dest) {
				return nil, false
			}
		}
		puts = append(puts, &put{Placement: pl, steps: []int{i}, names: []string{s.Name}})
	}
	return puts, len(puts) > 0
}

// uploadOneByOne is UploadSteps without a batched stat: each step asks
// for its kinds when it runs.
func uploadOneByOne(ctx context.Context, r Remote, steps []Step) (Stats, error) {
	var total Stats
	for i, s := range steps {
		pl, err := s.Plan(destKind(ctx, r))
		if err == nil {
			var st Stats
			st, err = putPlan(ctx, r, pl, s.Name)
			total.add(st)
		}
		if err != nil {
			return total, &StepError{Steps: []int{i}, Err: err}
		}
	}
	return total, nil
}

// withKinds is a Remote whose batched stats are answered from a model
// first: UploadSteps resuming after a re-stat plans with what it knows.
type withKinds struct {
	Remote
	m *model
}

func (w withKinds) statAll(ctx context.Context, paths []string) ([]archive.Kind, error) {
	out := make([]archive.Kind, len(paths))
	var ask []string
	var at []int
	for i, p := range paths {
		if k, ok := w.m.kind(p); ok {
			out[i] = k
			continue
		}
		ask, at = append(ask, p), append(at, i)
	}
	if len(ask) > 0 {
		kinds, err := w.Remote.(statAller).statAll(ctx, ask)
		if err != nil {
			return nil, err
		}
		for j, k := range kinds {
			out[at[j]] = k
		}
	}
	return out, nil
}

// model is what the sandbox's paths are, as layers: kinds statted, and
// on top the effect of each upload planned since, newest last.
type model struct {
	layers []layer
}

// layer answers for a path (ok), or passes it to the layer below.
type layer func(p string) (k archive.Kind, known, ok bool)

func (m *model) known(paths []string, kinds []archive.Kind) {
	at := make(map[string]archive.Kind, len(paths))
	for i, p := range paths {
		at[clean(p)] = kinds[i]
	}
	m.layers = append(m.layers, func(p string) (archive.Kind, bool, bool) {
		k, ok := at[p]
		return k, true, ok
	})
}

// placed adds what an upload of pl does: its destination and every
// directory above it are directories; each item is what its local
// source is (a file, a directory), and what is below an item unknown (a
// tree of the host's); the rest is as it was.
func (m *model) placed(pl Placement) {
	dest := clean(pl.Dest)
	items := map[string]archive.Kind{}
	whole := false // what dest holds now is not known
	for _, it := range pl.Items {
		if it.Name != "." && pl.Place != archive.PlaceAs {
			items[it.Name] = localKind(it.Src)
			continue
		}
		// A directory's contents, or (PlaceAs) the item is dest itself:
		// dest holds the directory's entries.
		es, err := os.ReadDir(it.Src)
		if err != nil {
			whole = true
			continue
		}
		for _, e := range es {
			items[e.Name()] = localKind(filepath.Join(it.Src, e.Name()))
		}
	}
	m.layers = append(m.layers, func(p string) (archive.Kind, bool, bool) {
		if _, below := under(dest, p); p == dest || below {
			return archive.Dir, true, true
		}
		rel, ok := under(p, dest)
		if !ok {
			return 0, false, false
		}
		if whole {
			return 0, false, true
		}
		first, rest, deeper := strings.Cut(rel, "/")
		k, ok := items[first]
		switch {
		case !ok:
			return 0, false, false
		case deeper && rest != "" || k == archive.Other:
			return 0, false, true
		}
		return k, true, true
	})
}

// localKind is what the local path p becomes in the sandbox, as a
// destination's kind (a final symlink followed): Other when that is not
// known, a symlink's target being the sandbox's.
func localKind(p string) archive.Kind {
	fi, err := os.Lstat(p)
	switch {
	case err != nil:
		return archive.Other
	case fi.Mode().IsRegular():
		return archive.File
	case fi.IsDir():
		return archive.Dir
	}
	return archive.Other
}

// kind is p's kind, and whether it is known.
func (m *model) kind(p string) (archive.Kind, bool) {
	p = clean(p)
	for i := len(m.layers) - 1; i >= 0; i-- {
		if k, known, ok := m.layers[i](p); ok {
			return k, known
		}
	}
	return 0, false
}

func clean(p string) string { return path.Clean(p) }

// under is p relative to dir when p is strictly below dir.
func under(p, dir string) (string, bool) {
	switch {
	case dir == ".":
		if p == "." || strings.HasPrefix(p, "/") || p == ".." || strings.HasPrefix(p, "../") {
			return "", false
		}
		return p, true
	case dir == "/":
		if p == "/" || !strings.HasPrefix(p, "/") {
			return "", false
		}
		return p[1:], true
	}
	rel, ok := strings.CutPrefix(p, dir+"/")
	return rel, ok && rel != ""
}

// related reports whether one of a and b is the other or below it.
func related(a, b string) bool {
	a, b = clean(a), clean(b)
	_, ab := under(a, b)
	_, ba := under(b, a)
	return a == b || ab || ba
}

// put is one Put of UploadSteps: the steps whose items it carries.
type put struct {
	Placement
	steps []int
	names []string // of the steps, for errors
}

// join adds pl, step i's, to puts: into an earlier Put to the same
// destination when that one places into it (or makes it) and none of
// the names clash, so that one stream carries both; otherwise as a Put
// of its own. A directory made new under an earlier Put's destination
// is one more entry of that Put.
func join(puts []*put, pl Placement, i int, name string) []*put {
	for _, q := range puts {
		if q.Place == archive.PlaceAs || pl.Place == archive.PlaceAs {
			continue
		}
		items := pl.Items
		switch {
		case clean(q.Dest) == clean(pl.Dest) && pl.Place == archive.PlaceInto:
		case pl.Place == archive.PlaceNew && clean(path.Dir(clean(pl.Dest))) == clean(q.Dest) && len(pl.Items) == 1 && pl.Items[0].Name == ".":
			items = []Item{{Src: pl.Items[0].Src, Name: path.Base(clean(pl.Dest))}}
		default:
			continue
		}
		if !clashFree(q.Items, items) {
			continue
		}
		// Only the newest Put related to pl's destination may take it:
		// a later one in between would have run after it.
		if newer := laterRelated(puts, q, pl.Dest); newer {
			continue
		}
		q.Items = append(q.Items, items...)
		q.steps = append(q.steps, i)
		q.names = append(q.names, name)
		return puts
	}
	return append(puts, &put{Placement: pl, steps: []int{i}, names: []string{name}})
}

// laterRelated reports whether a Put after q in puts touches a path
// related to dest.
func laterRelated(puts []*put, q *put, dest string) bool {
	after := false
	for _, o := range puts {
		if o == q {
			after = true
			continue
		}
		if after && related(o.Dest, dest) {
			return true
		}
	}
	return false
}

func clashFree(a, b []Item) bool {
	seen := map[string]bool{}
	for _, it := range a {
		seen[it.Name] = true
	}
	for _, it := range b {
		if it.Name == "." || seen["."] || seen[it.Name] {
			return false
		}
		seen[it.Name] = true
	}
	return true
}

// runPuts runs puts, each once the earlier ones to related paths have
// ended, the others at once (gRPC streams of one connection are
// concurrent), and returns their total, or the earliest step's failure.
// A Put whose predecessor failed does not run; one that runs is not
// cancelled by another's failure: a Put the agent has checked is placed
// whole or not at all, and runPuts returns when all have ended.
func runPuts(ctx context.Context, r Remote, puts []*put) (Stats, error) {
	if len(puts) == 1 {
		return runPut(ctx, r, puts[0])
	}
	type result struct {
		ended chan struct{}
		st    Stats
		err   error
	}
	res := make([]*result, len(puts))
	for i := range puts {
		res[i] = &result{ended: make(chan struct{})}
	}
	for i, p := range puts {
		var deps []*result
		for j := range i {
			if related(puts[j].Dest, p.Dest) {
				deps = append(deps, res[j])
			}
		}
		go func() {
			defer close(res[i].ended)
			for _, d := range deps {
				if <-d.ended; d.err != nil {
					res[i].err = errSkipped
					return
				}
			}
			res[i].st, res[i].err = runPut(ctx, r, p)
		}()
	}
	var total Stats
	var first error
	for _, r := range res {
		<-r.ended
		total.add(r.st)
		if r.err != nil && r.err != errSkipped && first == nil {
			first = r.err
		}
	}
	return total, first
}

// errSkipped is a Put not run because one it waited for failed.
var errSkipped = errors.New("skipped")

func runPut(ctx context.Context, r Remote, p *put) (Stats, error) {
	st, err := putPlan(ctx, r, p.Placement, strings.Join(p.names, " and "))
	if err != nil {
		return st, &StepError{Steps: p.steps, Err: err}
	}
	return st, nil
}
