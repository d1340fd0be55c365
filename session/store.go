package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// DefaultGrace is Config.Grace's default.
const DefaultGrace = time.Hour

// Config configures a Store. It is not changed after New.
type Config struct {
	// Backend holds the store's objects. Required.
	Backend Backend
	// Grace protects new chunks from Prune: an unreferenced chunk is
	// removed only once its last Put is older than Grace, and older than
	// Grace/2 before the start of every Save in flight. A Save rewrites
	// an existing chunk it reuses that was last written more than Grace/2
	// before it began and is not in the snapshot it starts from (see the
	// package doc). [DefaultGrace] if zero.
	Grace time.Duration
	// Now is the clock [time.Now if nil].
	Now func() time.Time
	// Pack makes Save store new chunks in pack files of about PackSize
	// bytes, each one object with an index object beside it (see
	// pack.go), rather than one object per chunk; and makes Save's and
	// CheckPresent's look-ups use listings and the packs' indexes rather
	// than one request per chunk. For S3, where a request costs more than
	// the bytes it carries. Reads understand packs and loose chunks
	// either way, so a store may hold both.
	Pack bool
	// PackSize is the size at which a pack is sealed and uploaded; at
	// most MaxPackSize/2. DefaultPackSize if zero.
	PackSize int
	// LockTTL is how long a Save's or a Prune's lock object outlives its
	// last renewal (see the package doc): what a save that crashed keeps
	// from Prune, and how long a prune that crashed makes saves wait.
	// [DefaultLockTTL] if zero.
	LockTTL time.Duration
	// Limits are the restore's limits, which a save stays within so that
	// every snapshot it commits can be restored (see savelimits.go);
	// zero fields are archive.DefaultLimits'. Only tests lower them: a
	// restore through ferry's agent applies the agent's own defaults.
	Limits archive.Limits
}

// DefaultPackSize is Config.PackSize's default: a pack is one GET of a
// few milliseconds on a fast link, a restore holds a few of them in
// memory, and a save two on their way to the store and one filling.
const DefaultPackSize = 4 << 20

func (c *Config) applyDefaults() {
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.PackSize == 0 {
		c.PackSize = DefaultPackSize
	}
	if c.LockTTL == 0 {
		c.LockTTL = DefaultLockTTL
	}
}

// Store is a snapshot store over a Backend. It is safe for concurrent use,
// and several Stores (processes, nodes) may share one backend: commits are
// exclusive creations, so they never overwrite each other.
type Store struct {
	b   Backend
	cfg Config

	view  view      // where chunks are, from listings and pack indexes
	packs packCache // packs fetched for reading
}

// New returns a Store for cfg.
func New(cfg Config) (*Store, error) {
	if cfg.Backend == nil {
		return nil, errors.New("session: nil backend")
	}
	if cfg.LockTTL < 0 || cfg.LockTTL > 0 && cfg.LockTTL < 60*time.Millisecond {
		return nil, fmt.Errorf("session: lock TTL %v: want 60ms or more", cfg.LockTTL)
	}
	if cfg.Grace < 0 {
		return nil, fmt.Errorf("session: negative grace %v", cfg.Grace)
	}
	if cfg.PackSize < 0 || cfg.PackSize > MaxPackSize/2 {
		return nil, fmt.Errorf("session: pack size %d: want 0 to %d", cfg.PackSize, MaxPackSize/2)
	}
	lim, err := cfg.Limits.WithDefaults()
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	cfg.Limits = lim
	cfg.applyDefaults()
	return &Store{b: cfg.Backend, cfg: cfg}, nil
}

const maxKeyLen = 128

// ValidKey reports whether key can name a session in the store: 1 to 128
// bytes of ASCII letters, digits, '.', '_' and '-', not starting with '.'
// or '-'. Every TaskKey is valid.
func ValidKey(key string) error {
	if key == "" || len(key) > maxKeyLen || key[0] == '.' || key[0] == '-' {
		return fmt.Errorf("%w: %q", ErrInvalidKey, key)
	}
	for _, c := range []byte(key) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q", ErrInvalidKey, key)
		}
	}
	return nil
}

// snapshotObject is one committed manifest object of a key.
type snapshotObject struct {
	Seq int64
	ObjectInfo
}

// snapshots lists the committed manifest objects of key, by ascending
// sequence number.
func (s *Store) snapshots(ctx context.Context, key string) ([]snapshotObject, error) {
	var out []snapshotObject
	prefix := snapshotPrefix + key + "/"
	err := s.b.List(ctx, prefix, func(o ObjectInfo) error {
		n, err := strconv.ParseInt(strings.TrimPrefix(o.Name, prefix), 10, 64)
		if err == nil && n > 0 && strconv.FormatInt(n, 10) == o.Name[len(prefix):] {
			out = append(out, snapshotObject{n, o})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list snapshots of %s: %w", key, err)
	}
	slices.SortFunc(out, func(a, b snapshotObject) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

// sequences returns the committed sequence numbers of key, ascending.
func (s *Store) sequences(ctx context.Context, key string) ([]int64, error) {
	objs, err := s.snapshots(ctx, key)
	if err != nil {
		return nil, err
	}
	seqs := make([]int64, len(objs))
	for i, o := range objs {
		seqs[i] = o.Seq
	}
	return seqs, nil
}

// parent finds what a save of key starts from: the newest snapshot whose
// manifest reads (prev, with sequence number parent; nil and 0 if none;
// the caller closes prev)
// and the newest sequence number committed (last), which the save's
// commit follows. A damaged manifest is passed over, with a warning, so
// that saves go on past it; a backend failure is an error.
func (s *Store) parent(ctx context.Context, key string) (prev *Parent, parent, last int64, err error) {
	seqs, err := s.sequences(ctx, key)
	if err != nil || len(seqs) == 0 {
		return nil, 0, 0, err
	}
	last = seqs[len(seqs)-1]
	for i := len(seqs) - 1; i >= 0; i-- {
		p, err := s.loadParent(ctx, key, seqs[i])
		if errors.Is(err, ErrManifest) || errors.Is(err, ErrNoSnapshot) {
			// Damaged, or pruned since the listing.
			slog.Warn("session: passing over a snapshot that cannot be read", "key", key, "snapshot", seqs[i], "err", err)
			continue
		}
		if err != nil {
			return nil, 0, 0, err
		}
		return p, seqs[i], last, nil
	}
	return nil, 0, last, nil
}

// Keys returns the keys that have at least one snapshot, sorted.
func (s *Store) Keys(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	err := s.b.List(ctx, snapshotPrefix, func(o ObjectInfo) error {
		key, _, ok := strings.Cut(strings.TrimPrefix(o.Name, snapshotPrefix), "/")
		if ok && ValidKey(key) == nil {
			seen[key] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}

// Load reads and validates snapshot seq of key, or the newest if seq is 0.
// A key without snapshots, or without that one, matches ErrNoSnapshot; a
// damaged manifest matches ErrManifest.
func (s *Store) Load(ctx context.Context, key string, seq int64) (*Manifest, error) {
	if err := ValidKey(key); err != nil {
		return nil, err
	}
	if seq == 0 {
		seqs, err := s.sequences(ctx, key)
		if err != nil {
			return nil, err
		}
		if len(seqs) == 0 {
			return nil, fmt.Errorf("load snapshot of %s: %w", key, ErrNoSnapshot)
		}
		seq = seqs[len(seqs)-1]
	}
	return s.load(ctx, key, seq)
}

// openManifest opens the manifest of snapshot seq of key; a missing one
// matches ErrNoSnapshot.
func (s *Store) openManifest(ctx context.Context, key string, seq int64) (io.ReadCloser, error) {
	r, err := s.b.Get(ctx, manifestName(key, seq))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("load snapshot %d of %s: %w", seq, key, ErrNoSnapshot)
	}
	if err != nil {
		return nil, fmt.Errorf("load snapshot %d of %s: %w", seq, key, err)
	}
	return r, nil
}

func (s *Store) load(ctx context.Context, key string, seq int64) (*Manifest, error) {
	return s.loadWith(ctx, key, seq, decodeManifest)
}

// loadHeader is load without the entries, which it checks as it reads
// and then drops: a listing holds no manifest whole.
func (s *Store) loadHeader(ctx context.Context, key string, seq int64) (*Manifest, error) {
	return s.loadWith(ctx, key, seq, func(r io.Reader) (*Manifest, error) { return readManifest(r, nil) })
}

func (s *Store) loadWith(ctx context.Context, key string, seq int64, decode func(io.Reader) (*Manifest, error)) (*Manifest, error) {
	r, err := s.openManifest(ctx, key, seq)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	m, err := decode(r)
	if err != nil {
		return nil, fmt.Errorf("load snapshot %d of %s: %w", seq, key, err)
	}
	if m.Key != key || m.Seq != seq {
		return nil, fmt.Errorf("load snapshot %d of %s: %w: it says it is snapshot %d of %s", seq, key, ErrManifest, m.Seq, m.Key)
	}
	return m, nil
}

// List returns the snapshots of key, or of every key if key is "", by key
// and then sequence. A manifest that does not decode or validate (damage,
// or a hostile save of an older ferry) is listed with its key, sequence
// and Err, so that one broken snapshot hides neither the others nor
// itself; a manifest removed since the listing is left out. A backend
// that fails is an error.
func (s *Store) List(ctx context.Context, key string) ([]SnapshotInfo, error) {
	keys := []string{key}
	if key == "" {
		var err error
		if keys, err = s.Keys(ctx); err != nil {
			return nil, err
		}
	} else if err := ValidKey(key); err != nil {
		return nil, err
	}
	var out []SnapshotInfo
	for _, k := range keys {
		seqs, err := s.sequences(ctx, k)
		if err != nil {
			return nil, err
		}
		for _, seq := range seqs {
			m, err := s.loadHeader(ctx, k, seq)
			switch {
			case errors.Is(err, ErrManifest):
				out = append(out, SnapshotInfo{Key: k, Seq: seq, Err: err.Error()})
				continue
			case errors.Is(err, ErrNoSnapshot):
				continue // pruned meanwhile
			case err != nil:
				return nil, err
			}
			out = append(out, m.Info())
		}
	}
	return out, nil
}

// ReadChunk returns the plaintext of chunk id, checked against id, in
// buf's storage if it is large enough (MaxChunkSize). A missing chunk
// matches ErrChunkMissing, a damaged one ErrChunkCorrupt.
func (s *Store) ReadChunk(ctx context.Context, id ID, buf []byte) ([]byte, error) {
	return s.readChunk(ctx, id, buf)
}
