// Package stores opens a session store from where it lives, a directory
// or s3://BUCKET/PREFIX, composed as ferry's command line composes it: an
// S3 store written in packs and read through the node's chunk cache, a
// directory written one object per chunk. It is its own package because
// package session cannot import its backends, which import it.
package stores

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/cache"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/session/s3store"
)

// Options shape Open. The zero value opens an existing store for reading
// and writing, through the chunk cache when it is on S3.
type Options struct {
	// Create makes a missing directory store (the first save on a node);
	// without it a missing one is a *MissingError. A bucket is never
	// created.
	Create bool
	// NoCache reads an S3 store directly, as verify must.
	NoCache bool
	// CacheDir is the chunk cache of an S3 store: "" is cache.DefaultDir
	// ($FERRY_CACHE_DIR, else the user's cache directory), "off" none.
	CacheDir string
	// Endpoint is the S3 endpoint; "" is $AWS_ENDPOINT_URL_S3, else
	// $AWS_ENDPOINT_URL, else AWS. Credentials come from the AWS chain
	// (see s3store.Config).
	Endpoint string
	// Commit is how an S3 store keeps a commit exclusive.
	Commit s3store.CommitMode
	// Grace is the store's prune grace (session.Config.Grace).
	Grace time.Duration
}

// ErrLocation means a location that is neither a directory nor an s3://
// URL, or an s3:// URL that does not parse. The error that matches it
// says what is wrong with the location, in its own words.
var ErrLocation = errors.New("stores: bad store location")

type locationError struct{ err error }

func (e locationError) Error() string        { return e.err.Error() }
func (e locationError) Unwrap() error        { return e.err }
func (e locationError) Is(target error) bool { return target == ErrLocation }

// MissingError is a store that does not exist: a directory (which a save
// creates) or an S3 bucket (which ferry never creates). It matches
// session.ErrNoStore.
type MissingError struct {
	Location string
	// Dir is set for a directory store.
	Dir bool
	why string
	err error
}

func (e *MissingError) Error() string {
	return "session store " + e.Location + " does not exist" + e.why
}

func (e *MissingError) Unwrap() error { return e.err }

// Open opens the store at loc; "" is session.DefaultLocation.
func Open(ctx context.Context, loc string, o Options) (*session.Store, error) {
	if loc == "" {
		var err error
		if loc, err = session.DefaultLocation(); err != nil {
			return nil, err
		}
	}
	var b session.Backend
	pack := false
	switch {
	case strings.HasPrefix(loc, "s3://"):
		c, err := s3store.ParseURL(loc)
		if err != nil {
			return nil, locationError{err}
		}
		c.Endpoint = o.Endpoint
		c.Commit = o.Commit
		c = s3store.FromEnv(c)
		sb, err := s3store.New(ctx, c)
		if errors.Is(err, session.ErrNoStore) {
			endpoint := c.Endpoint
			if endpoint == "" {
				endpoint = s3store.DefaultEndpoint
			}
			return nil, &MissingError{Location: loc, why: fmt.Sprintf(": no bucket %s at %s (ferry creates none)", c.Bucket, endpoint), err: err}
		}
		if err != nil {
			return nil, fmt.Errorf("session store %s: %w", loc, err)
		}
		b = sb
		// One object per chunk costs S3 a request per chunk on every
		// save and restore; packs cost one per few MiB.
		pack = true
		if !o.NoCache {
			dir := o.CacheDir
			if dir == "" {
				if dir, err = cache.DefaultDir(); err != nil {
					return nil, err
				}
			}
			if dir != "off" {
				if b, err = cache.New(cache.Config{Backend: sb, Dir: dir}); err != nil {
					return nil, err
				}
			}
		}
	case strings.Contains(loc, "://"):
		return nil, locationError{fmt.Errorf("session store %s: want a directory or s3://BUCKET/PREFIX", loc)}
	default:
		open := local.OpenDir
		if o.Create {
			open = local.NewDir
		}
		lb, err := open(loc)
		if errors.Is(err, session.ErrNoStore) {
			return nil, &MissingError{Location: loc, Dir: true, why: " (the first save creates it)", err: err}
		}
		if err != nil {
			return nil, err
		}
		b = lb
	}
	return session.New(session.Config{Backend: b, Pack: pack, Grace: o.Grace})
}
