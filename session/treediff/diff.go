package treediff

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/aymanbagabas/go-udiff"
	"github.com/bmatcuk/doublestar/v4"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// Filter limits a diff to some paths. Include and Exclude are doublestar
// globs ("**/*.go", "vendor/**") matched against an entry's path; with
// Include set an entry must match one, and one matching Exclude is left
// out whatever Include says. Two lists rather than one glob, because the
// common case is everything but a few trees (".git/**", "node_modules/**"),
// which a single glob cannot say.
type Filter struct {
	Include []string `json:"include,omitempty"`
	Exclude []string `json:"exclude,omitempty"`
}

// ErrBadGlob matches a Filter pattern doublestar cannot parse.
var ErrBadGlob = errors.New("treediff: bad glob")

// Validate refuses a pattern that cannot match anything as written.
func (f Filter) Validate() error {
	for _, p := range append(append([]string(nil), f.Include...), f.Exclude...) {
		if !doublestar.ValidatePattern(p) {
			return fmt.Errorf("%w: %q", ErrBadGlob, p)
		}
	}
	return nil
}

// Match reports whether the diff keeps path p.
func (f Filter) Match(p string) bool {
	for _, g := range f.Exclude {
		if ok, _ := doublestar.Match(g, p); ok {
			return false
		}
	}
	if len(f.Include) == 0 {
		return true
	}
	for _, g := range f.Include {
		if ok, _ := doublestar.Match(g, p); ok {
			return true
		}
	}
	return false
}

// What a modification changed, as Change.Changed lists it.
const (
	ChangedType    = "type"
	ChangedContent = "content"
	ChangedMode    = "mode"
	ChangedTarget  = "target"
)

// State is one side of a change: the entry as a manifest lists it.
type State struct {
	Type   Type   `json:"type"`
	Mode   Perm   `json:"mode"`
	Size   int64  `json:"size,omitempty"`
	Digest string `json:"digest,omitempty"`
	Target string `json:"target,omitempty"`
}

func stateOf(e *Entry) *State {
	return &State{Type: e.Type, Mode: e.Mode, Size: e.Size, Digest: e.Digest, Target: e.Target}
}

// Change is one path that differs: created (After only), deleted
// (Before only) or modified (both, Changed saying what).
type Change struct {
	Path    string   `json:"path"`
	Changed []string `json:"changed,omitempty"`
	Before  *State   `json:"before,omitempty"`
	After   *State   `json:"after,omitempty"`
	// Diff is the unified diff of a text file's content (--content);
	// NoDiff says why a content change has none.
	Diff   string `json:"diff,omitempty"`
	NoDiff string `json:"no_diff,omitempty"`
}

// Totals count a report's changes.
type Totals struct {
	Created  int `json:"created"`
	Deleted  int `json:"deleted"`
	Modified int `json:"modified"`
	// Content, Mode, Type and Target count the modifications that
	// changed each (one may change several).
	Content int `json:"content"`
	Mode    int `json:"mode"`
	Type    int `json:"type"`
	Target  int `json:"target"`
	// CreatedBytes and DeletedBytes sum the created and deleted files'
	// sizes; BytesBefore and BytesAfter those of the modified files.
	CreatedBytes int64 `json:"created_bytes"`
	DeletedBytes int64 `json:"deleted_bytes"`
	BytesBefore  int64 `json:"bytes_before"`
	BytesAfter   int64 `json:"bytes_after"`
	// EntriesBefore and EntriesAfter are the manifests' sizes, before
	// the filter.
	EntriesBefore int `json:"entries_before"`
	EntriesAfter  int `json:"entries_after"`
}

// Report is the diff of one directory. Each list is in walk order (by
// path, a directory before its contents).
type Report struct {
	Sandbox string `json:"sandbox,omitempty"`
	Dir     string `json:"dir"`
	// Mode is how the after manifest was taken ("agent", "posix"), and
	// BeforeMode the before's; MovedContents says whether either
	// downloaded the directory's files to take it.
	Mode          string    `json:"mode"`
	BeforeMode    string    `json:"before_mode"`
	MovedContents bool      `json:"moved_contents"`
	WireBytes     int64     `json:"wire_bytes"`
	Filter        Filter    `json:"filter"`
	Created       []*Change `json:"created"`
	Deleted       []*Change `json:"deleted"`
	Modified      []*Change `json:"modified"`
	Totals        Totals    `json:"totals"`
	// Error, in a Document, is why this directory has no diff (its
	// manifest after the command failed); the lists are then empty.
	Error string `json:"error,omitempty"`
}

// ErrDirMismatch matches a diff of manifests of two directories.
var ErrDirMismatch = errors.New("treediff: manifests of different directories")

// Diff compares two manifests of one directory, keeping the paths f
// matches. Each manifest must hold its entries in walk order, as Take
// and ReadManifest give them. Unified diffs need the texts of kept
// content (Options.ContentCap): a content change without both sides'
// text says why in NoDiff.
func Diff(before, after *Manifest, f Filter) (*Report, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if path.Clean(before.Dir) != path.Clean(after.Dir) {
		return nil, fmt.Errorf("%w: %s and %s", ErrDirMismatch, before.Dir, after.Dir)
	}
	content := before.ContentCap > 0 || after.ContentCap > 0
	r := &Report{
		Sandbox: after.Sandbox, Dir: after.Dir, Mode: after.Mode, BeforeMode: before.Mode,
		MovedContents: before.MovedContents || after.MovedContents, WireBytes: before.WireBytes + after.WireBytes,
		Filter: f, Created: []*Change{}, Deleted: []*Change{}, Modified: []*Change{},
	}
	r.Totals.EntriesBefore, r.Totals.EntriesAfter = len(before.Entries), len(after.Entries)
	b, a := before.Entries, after.Entries
	for len(b) > 0 || len(a) > 0 {
		var c int
		switch {
		case len(b) == 0:
			c = 1
		case len(a) == 0:
			c = -1
		default:
			c = archive.CompareWalk(b[0].Path, a[0].Path)
		}
		switch c {
		case -1:
			if f.Match(b[0].Path) {
				ch := &Change{Path: b[0].Path, Before: stateOf(&b[0])}
				if content && b[0].Type == File {
					ch.Diff, ch.NoDiff = unified(ch.Path, b[0].Text, ptr(""))
				}
				r.Deleted = append(r.Deleted, ch)
				r.Totals.DeletedBytes += b[0].Size
			}
			b = b[1:]
		case 1:
			if f.Match(a[0].Path) {
				ch := &Change{Path: a[0].Path, After: stateOf(&a[0])}
				if content && a[0].Type == File {
					ch.Diff, ch.NoDiff = unified(ch.Path, ptr(""), a[0].Text)
				}
				r.Created = append(r.Created, ch)
				r.Totals.CreatedBytes += a[0].Size
			}
			a = a[1:]
		default:
			if ch := modified(&b[0], &a[0], content); ch != nil && f.Match(ch.Path) {
				r.Modified = append(r.Modified, ch)
				r.count(ch)
			}
			b, a = b[1:], a[1:]
		}
	}
	r.Totals.Created, r.Totals.Deleted, r.Totals.Modified = len(r.Created), len(r.Deleted), len(r.Modified)
	return r, nil
}

func (r *Report) count(ch *Change) {
	for _, what := range ch.Changed {
		switch what {
		case ChangedContent:
			r.Totals.Content++
		case ChangedMode:
			r.Totals.Mode++
		case ChangedType:
			r.Totals.Type++
		case ChangedTarget:
			r.Totals.Target++
		}
	}
	r.Totals.BytesBefore += ch.Before.Size
	r.Totals.BytesAfter += ch.After.Size
}

// modified is the change from b to a, the same path, or nil if none.
// mtimes are not compared: a rewrite with the same bytes is no change.
func modified(b, a *Entry, content bool) *Change {
	var what []string
	if b.Type != a.Type {
		what = append(what, ChangedType)
	} else {
		switch {
		case b.Type == File && b.Digest != a.Digest:
			what = append(what, ChangedContent)
		case b.Type == Symlink && b.Target != a.Target:
			what = append(what, ChangedTarget)
		}
	}
	if b.Mode != a.Mode {
		what = append(what, ChangedMode)
	}
	if len(what) == 0 {
		return nil
	}
	ch := &Change{Path: a.Path, Changed: what, Before: stateOf(b), After: stateOf(a)}
	if content && what[0] == ChangedContent {
		ch.Diff, ch.NoDiff = unified(a.Path, b.Text, a.Text)
	}
	return ch
}

func ptr(s string) *string { return &s }

// unified is the unified diff of a text file's two contents, or why
// there is none.
func unified(p string, before, after *string) (diff, why string) {
	if before == nil || after == nil {
		// Not kept: over the cap, not text, or the total cap reached.
		return "", "content not kept (binary, over the size cap, or the total cap reached)"
	}
	d := udiff.Unified("a/"+p, "b/"+p, *before, *after)
	if d == "" {
		return "", "no text difference"
	}
	return d, ""
}

// Summary is the report in one line, as `ferry run` prints it.
func (r *Report) Summary() string {
	t := r.Totals
	var what []string
	for _, c := range []struct {
		n    int
		name string
	}{{t.Content, "content"}, {t.Mode, "mode"}, {t.Type, "type"}, {t.Target, "target"}} {
		if c.n > 0 {
			what = append(what, fmt.Sprintf("%d %s", c.n, c.name))
		}
	}
	mod := fmt.Sprintf("%d modified", t.Modified)
	if len(what) > 0 {
		mod += " (" + strings.Join(what, ", ") + ")"
	}
	how := r.Mode + " mode"
	if r.MovedContents {
		how += ", contents downloaded"
	}
	return fmt.Sprintf("%s: %d created, %s, %d deleted [%s]", r.Dir, t.Created, mod, t.Deleted, how)
}

// Document is workspace-diff.json: a run's reports, one a directory.
type Document struct {
	Format  int       `json:"format"`
	Sandbox string    `json:"sandbox,omitempty"`
	Dirs    []*Report `json:"dirs"`
}

// MarshalIndent is d as workspace-diff.json holds it.
func (d *Document) MarshalIndent() ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	return append(b, '\n'), err
}

// DocumentFile is the name `ferry run --diff` writes its Document under.
const DocumentFile = "workspace-diff.json"
