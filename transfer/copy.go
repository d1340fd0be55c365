package transfer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// contents reports whether p asks for a directory's contents ("dir/.").
func contents(p string) bool {
	return p == "." || strings.HasSuffix(p, "/.")
}

// Upload copies local sources to dst in r's sandbox with `cp -r`
// semantics: a directory into an existing directory lands as
// dst/basename, a directory to a missing path creates it with the
// directory's contents, "src/." copies the contents, a file to a missing
// path is a rename, and several sources need an existing directory.
func Upload(ctx context.Context, r Remote, srcs []string, dst string) (Stats, error) {
	name := r.Target().Name
	sources, err := lstatSources(srcs)
	if err != nil {
		return Stats{}, err
	}
	if pl, ok := autoPlan(r, sources, dst); ok {
		return putPlan(ctx, r, pl, uploadLabel(name, dst))
	}
	pl, err := planUpload(name, sources, dst, destKind(ctx, r))
	if err != nil {
		return Stats{}, err
	}
	return putPlan(ctx, r, pl, uploadLabel(name, dst))
}

// destKind asks r the kind of an upload's destination path, followed
// through a symlink, as cp does.
func destKind(ctx context.Context, r Remote) func(string) (archive.Kind, error) {
	return func(p string) (archive.Kind, error) {
		k, err := r.Stat(ctx, p, true)
		if err != nil {
			return k, fmt.Errorf("upload: stat %s:%s: %w", r.Target().Name, p, err)
		}
		return k, nil
	}
}

// autoPlan is the plan of an upload whose placement the agent can decide
// where dst is, with no stat of it first (UploadSpec.IntoIfDir): one
// source, not a directory's contents, and dst without a trailing slash.
// Into dst when it is a directory, else as dst: planUpload's outcomes,
// with dst's missing parents made as in POSIX mode.
func autoPlan(r Remote, sources []source, dst string) (Placement, bool) {
	if _, ok := r.(intoIfDirer); !ok || len(sources) != 1 || contents(sources[0].path) ||
		strings.HasSuffix(dst, "/") || path.Clean(dst) == "." || path.Clean(dst) == "/" {
		return Placement{}, false
	}
	s := sources[0]
	return Placement{Dest: dst, Place: archive.PlaceAs, IntoIfDir: true, SrcIsDir: s.info.IsDir(),
		Items: []Item{{s.path, filepath.Base(filepath.Clean(s.path))}}}, true
}

// intoIfDirer is a Remote that places an upload into its destination if
// that is a directory, else as it (agent mode).
type intoIfDirer interface{ intoIfDir() }

// uploadLabel names an upload to dst in sandbox name, for errors.
func uploadLabel(name, dst string) string { return fmt.Sprintf("upload to %s:%s", name, dst) }

// source is one local source of an upload.
type source struct {
	path string
	info os.FileInfo
}

func lstatSources(srcs []string) ([]source, error) {
	if len(srcs) == 0 {
		return nil, errors.New("upload: no sources")
	}
	var sources []source
	for _, s := range srcs {
		fi, err := os.Lstat(s)
		if err != nil {
			return nil, fmt.Errorf("upload %s: %w", s, ErrNoSource)
		}
		sources = append(sources, source{s, fi})
	}
	return sources, nil
}

// uploadStats are the sandbox paths planUpload may ask the kind of, for
// dst: dst itself and its parent.
func uploadStats(dst string) []string {
	return []string{dst, path.Dir(strings.TrimSuffix(dst, "/"))}
}

// planUpload decides, with cp's rules, where sources go for dst, given
// the kinds of the sandbox's paths (uploadStats(dst), following a final
// symlink) that kind reports. name is the sandbox's, for errors.
func planUpload(name string, sources []source, dst string, kind func(string) (archive.Kind, error)) (Placement, error) {
	k, err := kind(dst)
	if err != nil {
		return Placement{}, err
	}
	dstIsDir := k == archive.Dir
	if (len(sources) > 1 || strings.HasSuffix(dst, "/")) && !dstIsDir {
		if k == archive.Missing && len(sources) == 1 && sources[0].info.IsDir() {
			// "cp -r dir new/" creates new.
		} else {
			return Placement{}, fmt.Errorf("upload to %s:%s: %w", name, dst, ErrNotDir)
		}
	}

	// Decide what the archive holds and where it lands.
	pl := Placement{Dest: dst}
	switch {
	case dstIsDir:
		pl.Place = archive.PlaceInto
		for _, s := range sources {
			if s.info.IsDir() && contents(s.path) {
				pl.Items = append(pl.Items, Item{s.path, "."})
			} else {
				pl.Items = append(pl.Items, Item{s.path, filepath.Base(filepath.Clean(s.path))})
			}
		}
	case sources[0].info.IsDir():
		if k != archive.Missing {
			return Placement{}, fmt.Errorf("upload %s to %s:%s: cannot overwrite a non-directory with a directory", sources[0].path, name, dst)
		}
		pl.Place = archive.PlaceNew
		pl.Items = append(pl.Items, Item{sources[0].path, "."})
	default:
		// A file (or symlink) to a missing path or over a file: it lands
		// in dst's parent under dst's name, and a missing parent is made.
		pl.Dest = path.Dir(strings.TrimSuffix(dst, "/"))
		pl.Items = append(pl.Items, Item{sources[0].path, path.Base(dst)})
		pk, err := kind(pl.Dest)
		if err != nil {
			return Placement{}, err
		}
		switch pk {
		case archive.Dir:
			pl.Place = archive.PlaceInto
		case archive.Missing:
			pl.Place = archive.PlaceNew
		default:
			return Placement{}, fmt.Errorf("upload to %s:%s: %w", name, pl.Dest, ErrNotDir)
		}
	}
	return pl, nil
}

// putPlan uploads pl's items through r; label names the upload in
// errors.
func putPlan(ctx context.Context, r Remote, pl Placement, label string) (Stats, error) {
	// The remote side counts what it extracted and must find this many:
	// a stream that a relay ended early between two entries is caught.
	// The Remote runs the count, perhaps beside the stream; its error
	// names the source and is returned as it is.
	var countErr error
	count := func(ctx context.Context) (int64, error) {
		var want int64
		for _, it := range pl.Items {
			n, err := countEntries(ctx, it.Src, it.Name)
			if err != nil {
				countErr = fmt.Errorf("upload %s: %w", it.Src, err)
				return 0, countErr
			}
			want += n
		}
		return want, nil
	}
	cs, err := r.Upload(ctx, UploadSpec{Dest: pl.Dest, Place: pl.Place, Count: count, IntoIfDir: pl.IntoIfDir, SrcIsDir: pl.SrcIsDir}, Items(ctx, pl.Items...))
	if countErr != nil && errors.Is(err, countErr) {
		return Stats{}, countErr
	}
	if err != nil {
		return Stats{}, fmt.Errorf("%s: %w", label, err)
	}
	return cs, nil
}

// countEntries is how many archive entries Writer.Add(src, name) makes:
// everything under src, without src itself when its contents go to the
// archive root (name ".").
func countEntries(ctx context.Context, src, name string) (int64, error) {
	var n int64
	err := filepath.WalkDir(src, func(_ string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		n++
		return nil
	})
	if err != nil {
		return 0, err
	}
	if name == "." || name == "" {
		n--
	}
	return n, nil
}

// Download copies sources in r's sandbox to the local dst with the same
// semantics as Upload. Nothing is placed until the whole stream has been
// checked, and only the sources asked for are placed: a stream that
// carries anything else is refused (archive.ErrUnrequested).
func Download(ctx context.Context, r Remote, srcs []string, dst string, limits archive.Limits) (Stats, error) {
	if len(srcs) == 0 {
		return Stats{}, errors.New("download: no sources")
	}
	name := r.Target().Name
	if st, ok, err := downloadOne(ctx, r, srcs, dst, limits); ok {
		return st, err
	}
	kinds := make([]archive.Kind, len(srcs))
	for i, s := range srcs {
		k, err := r.Stat(ctx, s, false)
		if err != nil {
			return Stats{}, fmt.Errorf("download: stat %s:%s: %w", name, s, err)
		}
		if k == archive.Missing {
			return Stats{}, fmt.Errorf("download %s:%s: %w", name, s, ErrNoSource)
		}
		kinds[i] = k
	}
	fi, statErr := os.Stat(dst)
	dstIsDir := statErr == nil && fi.IsDir()
	if (len(srcs) > 1 || strings.HasSuffix(dst, string(os.PathSeparator))) && !dstIsDir {
		if !(statErr != nil && len(srcs) == 1 && kinds[0] == archive.Dir) {
			return Stats{}, fmt.Errorf("download to %s: %w", dst, ErrNotDir)
		}
	}
	var total Stats
	for i, s := range srcs {
		clean := path.Clean(s)
		var dir string
		var names []string
		var place archive.Placement
		switch {
		case kinds[i] == archive.Dir && contents(s):
			dir, names = clean, []string{"."}
			place = archive.PlaceNew
			if dstIsDir {
				place = archive.PlaceInto
			}
		case dstIsDir:
			dir, names = path.Dir(clean), []string{path.Base(clean)}
			place = archive.PlaceInto
		case kinds[i] == archive.Dir:
			if statErr == nil {
				return Stats{}, fmt.Errorf("download %s:%s to %s: cannot overwrite a non-directory with a directory", name, s, dst)
			}
			dir, names = clean, []string{"."}
			place = archive.PlaceNew
		default:
			// A file to a missing path or over a file: a rename, the
			// archive's one entry becoming dst.
			dir, names = path.Dir(clean), []string{path.Base(clean)}
			place = archive.PlaceAs
		}
		cs, err := r.Download(ctx, DownloadSpec{Dir: dir, Names: names, Local: dst, Place: place, Limits: limits})
		if err != nil {
			return Stats{}, fmt.Errorf("download %s:%s: %w", name, s, err)
		}
		total.add(cs)
	}
	return total, nil
}

// downloadOne is Download of one source to an existing directory or a
// missing path, without the stat of the source that Download makes
// first: placement is the host's, and an entry of any kind placed into
// such a dst or as it is the copy cp -r makes. The stat is a round trip
// before the data's (160 ms on a far link). ok is false, and nothing has
// been asked of r, where the source's kind decides: several sources,
// "src/.", a missing dst ending in a separator (a directory only) or a
// non-directory in the way.
func downloadOne(ctx context.Context, r Remote, srcs []string, dst string, limits archive.Limits) (_ Stats, ok bool, _ error) {
	if len(srcs) != 1 || contents(srcs[0]) {
		return Stats{}, false, nil
	}
	s := srcs[0]
	clean := path.Clean(s)
	base := path.Base(clean)
	if base == "." || base == ".." || base == "/" {
		return Stats{}, false, nil
	}
	place := archive.PlaceAs
	switch fi, err := os.Stat(dst); {
	case err == nil && fi.IsDir():
		place = archive.PlaceInto
	case err == nil, !errors.Is(err, fs.ErrNotExist), strings.HasSuffix(dst, string(os.PathSeparator)):
		return Stats{}, false, nil
	}
	name := r.Target().Name
	st, err := r.Download(ctx, DownloadSpec{Dir: path.Dir(clean), Names: []string{base}, Local: dst, Place: place, Limits: limits})
	if err != nil {
		// A missing source is the sandbox's error before any stream;
		// the stat says whether it was that, on the failure path only.
		if errors.Is(err, fs.ErrNotExist) {
			if k, serr := r.Stat(ctx, s, false); serr == nil && k == archive.Missing {
				return Stats{}, true, fmt.Errorf("download %s:%s: %w", name, s, ErrNoSource)
			}
		}
		return Stats{}, true, fmt.Errorf("download %s:%s: %w", name, s, err)
	}
	if place == archive.PlaceAs && st.Dirs > 0 {
		// The one top-level entry was a directory (nothing else has
		// entries under it): it is dst itself, which a copy of a
		// directory's contents to a missing path does not count.
		st.Dirs--
	}
	return st, true, nil
}
