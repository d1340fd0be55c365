package s3store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"time"

	"github.com/minio/minio-go/v7"
)

// ErrLeaseBusy is the error of an exclusive Put that waited four times
// Config.LeaseTTL for the lease of its directory without getting it.
var ErrLeaseBusy = errors.New("s3store: lease busy")

// leaseMark is the base name of a lease object: an exclusive Put of
// "snapshots/KEY/7" takes "snapshots/KEY/.ferry-lease", so commits of
// one key are serialised and those of different keys are not.
const leaseMark = ".ferry-lease"

// releaseWait bounds the release of a lease after its holder's context
// is done.
const releaseWait = 10 * time.Second

// lease is the content of a lease object.
type lease struct {
	// Owner is random, fresh for every attempt: reading back one's own
	// Owner is what makes one the holder.
	Owner string `json:"owner"`
	// Expires is the writer's clock plus LeaseTTL. It only lets a
	// waiter take over a lease its holder did not release sooner than
	// by watching it for LeaseTTL; safety does not depend on it.
	Expires time.Time `json:"expires"`
}

func leaseName(name string) string {
	if dir := path.Dir(name); dir != "." {
		return dir + "/" + leaseMark
	}
	return leaseMark
}

// putLeased is an exclusive Put on a server without conditional writes:
// it creates name with body only if absent, under the lease of name's
// directory.
//
// The protocol, for one attempt: wait until the lease is absent or
// expired; write a lease with a fresh owner (a plain PUT, which may
// overwrite another's); wait LeaseSettle; read the lease back. Only the
// attempt that reads back its own owner holds the lease. The holder
// checks that name is still absent, PUTs it (plainly) and deletes the
// lease if it is still its own. A name found present at any point is
// fs.ErrExist.
//
// Why two holders cannot both create name: let A write its lease before
// B. A read its own lease back, so B's write completed after A's
// read-back began (at r); B reads back no sooner than LeaseSettle after
// its write, so after r+LeaseSettle. A starts its PUT of name only
// within LeaseSettle/2 of r and gives it up at r+3/4·LeaseSettle, so
// A's object is in place before B checks that name is absent, and B
// fails with fs.ErrExist. This holds however the leases expire or are
// overwritten; expiry and the wait before writing only keep committers
// from overwriting each other's leases forever.
//
// Assumptions (documented in the package doc): the server is strongly
// consistent for a single object (a GET or HEAD that starts after a PUT
// or DELETE completed sees it; AWS S3 since December 2020), a PUT that
// the client gave up on does not land later, and the two nodes' clocks
// run at the same rate (only durations are compared, never two nodes'
// wall clocks).
func (b *Backend) putLeased(ctx context.Context, name string, body io.ReadSeeker, size int64) error {
	lk := b.key(leaseName(name))
	seen := map[string]time.Time{} // owner -> when this call first read it
	giveUp := time.Now().Add(4 * b.ttl)
	poll := min(max(b.settle/4, 10*time.Millisecond), 250*time.Millisecond)
	for {
		if time.Now().After(giveUp) {
			return fmt.Errorf("%w: %s: no attempt got it within %v", ErrLeaseBusy, leaseName(name), 4*b.ttl)
		}
		if exists, err := b.exists(ctx, name); err != nil {
			return err
		} else if exists {
			return fs.ErrExist
		}
		cur, err := b.readLease(ctx, lk)
		if err != nil {
			return err
		}
		if cur != nil && !b.expired(cur, seen) {
			if err := sleep(ctx, poll); err != nil {
				return err
			}
			continue
		}
		owner := randomHex(16)
		if err := b.writeLease(ctx, lk, owner); err != nil {
			return err
		}
		if err := sleep(ctx, b.settle); err != nil {
			return err
		}
		readBack := time.Now()
		cur, err = b.readLease(ctx, lk)
		if err != nil {
			return err
		}
		if cur == nil || cur.Owner != owner {
			continue // another attempt wrote after us: it may hold
		}
		err = b.commitLeased(ctx, name, body, size, readBack)
		b.release(ctx, lk, owner)
		if errors.Is(err, errLeaseSlow) {
			continue
		}
		return err
	}
}

// errLeaseSlow is the holder's: too much of LeaseSettle had passed to
// start its PUT; it tries again.
var errLeaseSlow = errors.New("lease held too long")

// commitLeased creates name as the lease holder that read its lease back
// at readBack.
func (b *Backend) commitLeased(ctx context.Context, name string, body io.ReadSeeker, size int64, readBack time.Time) error {
	if exists, err := b.exists(ctx, name); err != nil {
		return err
	} else if exists {
		return fs.ErrExist
	}
	if time.Since(readBack) > b.settle/2 {
		return errLeaseSlow
	}
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return err
	}
	pctx, cancel := context.WithDeadline(ctx, readBack.Add(b.settle*3/4))
	defer cancel()
	return b.putObject(pctx, b.key(name), body, size, false)
}

// expired reports whether l may be taken over: its stated expiry has
// passed on this node's clock, or this call has seen it unchanged for
// LeaseTTL (which needs no agreement between clocks).
func (b *Backend) expired(l *lease, seen map[string]time.Time) bool {
	if time.Now().After(l.Expires) {
		return true
	}
	first, ok := seen[l.Owner]
	if !ok {
		seen[l.Owner] = time.Now()
		return false
	}
	return time.Since(first) > b.ttl
}

// release deletes the lease key if owner still holds it. A lease
// overwritten meanwhile is left to its writer. Release runs even when
// ctx is done, for releaseWait at most: a lease left behind blocks the
// key's committers until it expires.
func (b *Backend) release(ctx context.Context, key, owner string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseWait)
	defer cancel()
	if cur, err := b.readLease(rctx, key); err == nil && cur != nil && cur.Owner == owner {
		b.client.RemoveObject(rctx, b.bucket, key, minio.RemoveObjectOptions{})
	}
}

// readLease returns the lease at key, nil if there is none. One that does
// not decode is expired (its owner is its bytes, so that it is never
// ours).
func (b *Backend) readLease(ctx context.Context, key string) (*lease, error) {
	obj, err := b.getObject(ctx, key)
	if isMissing(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read lease %s: %w", key, err)
	}
	defer obj.Close()
	data, err := io.ReadAll(io.LimitReader(obj, 4<<10))
	if err != nil {
		return nil, fmt.Errorf("read lease %s: %w", key, err)
	}
	var l lease
	if json.Unmarshal(data, &l) != nil || l.Owner == "" {
		return &lease{Owner: "undecodable " + hex.EncodeToString(data[:min(len(data), 16)])}, nil
	}
	return &l, nil
}

func (b *Backend) writeLease(ctx context.Context, key, owner string) error {
	data, err := json.Marshal(lease{Owner: owner, Expires: time.Now().Add(b.ttl).UTC()})
	if err != nil {
		return err
	}
	if err := b.putObject(ctx, key, bytes.NewReader(data), int64(len(data)), false); err != nil {
		return fmt.Errorf("write lease %s: %w", key, err)
	}
	return nil
}

// exists reports whether the object name exists.
func (b *Backend) exists(ctx context.Context, name string) (bool, error) {
	_, err := b.client.StatObject(ctx, b.bucket, b.key(name), minio.StatObjectOptions{})
	if isMissing(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat: %w", err)
	}
	return true, nil
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
