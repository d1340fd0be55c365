package s3store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/ferry-dev/ferry/session"
)

// ErrNoConditionalWrites is the error of New with CommitConditional on a
// server that does not honour If-None-Match: *.
var ErrNoConditionalWrites = errors.New("s3store: server does not support conditional writes (If-None-Match)")

const (
	// probeMark starts the names of New's probe objects, which List hides
	// and Put refuses.
	probeMark = ".ferry-probe-"
	// memMax is the largest body a Put holds in memory; a larger one is
	// spooled to a temporary file.
	memMax = 16 << 20
	// maxSize is the largest object one PUT can store.
	maxSize = 5 << 30
	// conflictRetries bounds the retries of an exclusive Put that got 409
	// ConditionalRequestConflict (a concurrent conditional write on AWS),
	// and of any Put that met a directory being removed (isDirRace).
	conflictRetries = 5
)

// Backend is a session.Backend on one bucket and prefix of an
// S3-compatible server.
type Backend struct {
	client      *minio.Client
	bucket      string
	prefix      string // "" or ending in "/"
	conditional bool   // else exclusive Puts take the lease
	settle, ttl time.Duration
}

var (
	_ session.Backend     = (*Backend)(nil)
	_ session.RangeGetter = (*Backend)(nil)
)

// New connects to the bucket of c, which must exist (a missing one is an
// error matching session.ErrNoStore; New creates none), and, unless
// c.Commit is CommitLease, probes whether the server honours conditional
// creates by putting one probe object under the prefix twice with
// If-None-Match: * (then deleting it).
func New(ctx context.Context, c Config) (*Backend, error) {
	c.applyDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	host, secure, err := endpointOf(c.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("s3store: %w", err)
	}
	prefix, err := prefixOf(c.Prefix)
	if err != nil {
		return nil, fmt.Errorf("s3store: %w", err)
	}
	creds, err := credentialsOf(c)
	if err != nil {
		return nil, err
	}
	client, err := minio.New(host, &minio.Options{
		Creds:     creds,
		Secure:    secure,
		Region:    c.Region,
		Transport: c.Transport,
	})
	if err != nil {
		return nil, fmt.Errorf("s3store: open %s: %w", host, err)
	}
	b := &Backend{client: client, bucket: c.Bucket, prefix: prefix, settle: c.LeaseSettle, ttl: c.LeaseTTL}
	ok, err := client.BucketExists(ctx, c.Bucket)
	if err != nil {
		return nil, fmt.Errorf("s3store: open bucket %s: %w", c.Bucket, err)
	}
	if !ok {
		return nil, fmt.Errorf("s3store: open bucket %s: %w", c.Bucket, session.ErrNoStore)
	}
	if c.Commit == CommitLease {
		return b, nil
	}
	if b.conditional, err = b.probe(ctx); err != nil {
		return nil, fmt.Errorf("s3store: probe conditional writes in %s: %w", c.Bucket, err)
	}
	if !b.conditional && c.Commit == CommitConditional {
		return nil, fmt.Errorf("s3store: bucket %s at %s: %w", c.Bucket, host, ErrNoConditionalWrites)
	}
	return b, nil
}

// ConditionalWrites reports whether exclusive Puts are conditional
// creates (If-None-Match: *); if not, they take the lease.
func (b *Backend) ConditionalWrites() bool { return b.conditional }

// probe creates a fresh object twice with If-None-Match: *; the server
// honours the condition if the second create fails with 412.
func (b *Backend) probe(ctx context.Context) (bool, error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	key := b.prefix + probeMark + hex.EncodeToString(rnd[:])
	defer b.client.RemoveObject(context.WithoutCancel(ctx), b.bucket, key, minio.RemoveObjectOptions{})
	for i := range 2 {
		err := b.putObject(ctx, key, bytes.NewReader(nil), 0, true)
		switch {
		case i == 1 && err == nil:
			return false, nil
		case isPrecondition(err):
			return i == 1, nil
		case isStatus(err, http.StatusNotImplemented):
			return false, nil
		case err != nil:
			return false, err
		}
	}
	panic("unreachable")
}

func (b *Backend) key(name string) string { return b.prefix + name }

// validName reports whether name is a clean relative slash path.
func validName(name string) bool {
	return fs.ValidPath(name) && name != "." && !strings.ContainsRune(name, '\\')
}

// hidden reports the names of the backend's own objects (probes and
// leases), which List hides and the other methods refuse.
func hidden(name string) bool {
	return strings.HasPrefix(name, probeMark) || path.Base(name) == leaseMark
}

func check(op, name string) error {
	if !validName(name) || hidden(name) {
		return &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	return nil
}

// Get implements session.Backend.
func (b *Backend) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := check("get", name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	body, err := b.getObject(ctx, b.key(name))
	if err != nil {
		return nil, pathError("get", name, err)
	}
	return body, nil
}

// GetRange implements session.RangeGetter: one GET with a Range header.
func (b *Backend) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	if err := check("get", name); err != nil {
		return nil, err
	}
	if off < 0 || length < 0 {
		return nil, &fs.PathError{Op: "get", Path: name, Err: fs.ErrInvalid}
	}
	if length == 0 {
		// A Range of no bytes cannot be written; the object must exist.
		if _, err := b.Stat(ctx, name); err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(off, off+length-1); err != nil {
		return nil, pathError("get", name, err)
	}
	body, _, _, err := minio.Core{Client: b.client}.GetObject(ctx, b.bucket, b.key(name), opts)
	if err != nil {
		return nil, pathError("get", name, err)
	}
	return body, nil
}

// getObject opens key in one GET, which reports a missing object now, not
// at the first Read (minio-go's Client.GetObject takes two requests for
// that). The body reads fail once ctx is done.
func (b *Backend) getObject(ctx context.Context, key string) (io.ReadCloser, error) {
	body, oi, _, err := minio.Core{Client: b.client}.GetObject(ctx, b.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	return sizedBody{body, oi.Size}, nil
}

// sizedBody is a GET's body with its Content-Length, so that a reader of
// a whole pack allocates its buffer once (a growing buffer ends up to
// twice the pack's size).
type sizedBody struct {
	io.ReadCloser
	size int64
}

// Size is the object's size as the server announced it; a reader must
// still not trust it beyond its own bound.
func (s sizedBody) Size() int64 { return s.size }

// Put implements session.Backend.
func (b *Backend) Put(ctx context.Context, name string, r io.Reader, exclusive bool) error {
	if err := check("put", name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	body, size, done, err := spool(ctx, r)
	if err != nil {
		return pathError("put", name, err)
	}
	defer done()
	if exclusive && !b.conditional {
		if err := b.putLeased(ctx, name, body, size); err != nil {
			return pathError("put", name, err)
		}
		return nil
	}
	for try := 0; ; try++ {
		err = b.putObject(ctx, b.key(name), body, size, exclusive)
		if !(exclusive && isConflict(err) || isDirRace(err)) || try == conflictRetries {
			break
		}
		if _, err := body.Seek(0, io.SeekStart); err != nil {
			return pathError("put", name, err)
		}
		select {
		case <-ctx.Done():
			return pathError("put", name, ctx.Err())
		case <-time.After(time.Duration(10<<try) * time.Millisecond):
		}
	}
	if err != nil {
		return pathError("put", name, err)
	}
	return nil
}

// putObject stores key in one PUT, created only if absent when exclusive.
func (b *Backend) putObject(ctx context.Context, key string, body io.Reader, size int64, exclusive bool) error {
	opts := minio.PutObjectOptions{DisableMultipart: true, ContentType: "application/octet-stream"}
	if exclusive {
		opts.SetMatchETagExcept("*")
	}
	_, err := b.client.PutObject(ctx, b.bucket, key, body, size, opts)
	return err
}

// spool reads r to its end, in memory up to memMax bytes and in a
// temporary file past that, so that a failing reader sends nothing and
// the body can be resent. done releases the body.
func spool(ctx context.Context, r io.Reader) (body io.ReadSeeker, size int64, done func(), err error) {
	if br, ok := r.(*bytes.Reader); ok && br.Size() <= maxSize {
		// Already in memory, and resendable: a pack of several MiB is
		// not copied a second time.
		start := br.Size() - int64(br.Len())
		return io.NewSectionReader(br, start, br.Size()-start), br.Size() - start, func() {}, nil
	}
	r = ctxReader{ctx, r}
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(r, memMax+1))
	if err != nil {
		return nil, 0, nil, err
	}
	if n <= memMax {
		return bytes.NewReader(buf.Bytes()), n, func() {}, nil
	}
	f, err := os.CreateTemp("", "ferry-s3-put-")
	if err != nil {
		return nil, 0, nil, err
	}
	done = func() { f.Close(); os.Remove(f.Name()) }
	n, err = io.Copy(f, io.MultiReader(&buf, io.LimitReader(r, maxSize+1-n)))
	if err == nil && n > maxSize {
		err = fmt.Errorf("object over the %d bytes of one PUT", int64(maxSize))
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		done()
		return nil, 0, nil, err
	}
	return f, n, done, nil
}

// Stat implements session.Backend.
func (b *Backend) Stat(ctx context.Context, name string) (session.ObjectInfo, error) {
	if err := check("stat", name); err != nil {
		return session.ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return session.ObjectInfo{}, err
	}
	oi, err := b.client.StatObject(ctx, b.bucket, b.key(name), minio.StatObjectOptions{})
	if err != nil {
		return session.ObjectInfo{}, pathError("stat", name, err)
	}
	return session.ObjectInfo{Name: name, Size: oi.Size, ModTime: oi.LastModified}, nil
}

// List implements session.Backend. It pages through ListObjectsV2 and
// skips "directory" keys ending in "/", which some servers report.
func (b *Backend) List(ctx context.Context, prefix string, fn func(session.ObjectInfo) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Canceling lctx stops minio-go's listing goroutine when fn stops early.
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for oi := range b.client.ListObjects(lctx, b.bucket, minio.ListObjectsOptions{Prefix: b.prefix + prefix, Recursive: true}) {
		if oi.Err != nil {
			if err := ctx.Err(); err != nil {
				return err
			}
			return fmt.Errorf("list %s: %w", prefix, oi.Err)
		}
		name, ok := strings.CutPrefix(oi.Key, b.prefix)
		if !ok || strings.HasSuffix(name, "/") || hidden(name) || !validName(name) {
			continue
		}
		if err := fn(session.ObjectInfo{Name: name, Size: oi.Size, ModTime: oi.LastModified}); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// Delete implements session.Backend.
func (b *Backend) Delete(ctx context.Context, name string) error {
	if err := check("delete", name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := b.client.RemoveObject(ctx, b.bucket, b.key(name), minio.RemoveObjectOptions{})
	if err != nil && !isMissing(err) {
		return pathError("delete", name, err)
	}
	return nil
}

// pathError wraps err for the object name, mapping S3's answers to the
// fs errors of the session.Backend contract.
func pathError(op, name string, err error) error {
	switch {
	case isMissing(err):
		err = fmt.Errorf("%w (%v)", fs.ErrNotExist, err)
	case isPrecondition(err):
		err = fmt.Errorf("%w (%v)", fs.ErrExist, err)
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

func errorResponse(err error) (minio.ErrorResponse, bool) {
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		return er, true
	}
	return er, false
}

func isStatus(err error, code int) bool {
	er, ok := errorResponse(err)
	return ok && er.StatusCode == code
}

// isMissing reports a missing object, not a missing bucket.
func isMissing(err error) bool {
	er, ok := errorResponse(err)
	return ok && er.StatusCode == http.StatusNotFound && er.Code != "NoSuchBucket"
}

func isPrecondition(err error) bool {
	er, ok := errorResponse(err)
	return ok && (er.StatusCode == http.StatusPreconditionFailed || er.Code == "PreconditionFailed")
}

// isConflict reports AWS's 409 ConditionalRequestConflict: another
// conditional write of the key was in flight; the advice is to retry.
func isConflict(err error) bool {
	er, ok := errorResponse(err)
	return ok && er.StatusCode == http.StatusConflict && er.Code == "ConditionalRequestConflict"
}

// isDirRace reports versitygw's ExistingObjectIsDirectory for a key
// under a "directory" that a concurrent Delete of its last object was
// removing: its posix backend keeps prefixes as directories and removes
// the empty ones. The PUT stored nothing; a retry succeeds.
func isDirRace(err error) bool {
	er, ok := errorResponse(err)
	return ok && er.Code == "ExistingObjectIsDirectory"
}

// ctxReader fails reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// credentialsOf is c's static keys, or else the AWS chain, checked once
// here so that a machine with no credentials at all is told so rather
// than sending unsigned requests that the server refuses one by one.
func credentialsOf(c Config) (*credentials.Credentials, error) {
	if c.AccessKeyID != "" {
		return credentials.NewStaticV4(c.AccessKeyID, c.SecretAccessKey, c.SessionToken), nil
	}
	creds := credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.FileAWSCredentials{},
		&credentials.IAM{},
	})
	v, err := creds.GetWithContext(nil)
	if err != nil {
		return nil, fmt.Errorf("s3store: credentials: %w", err)
	}
	if v.AccessKeyID == "" || v.SignerType.IsAnonymous() {
		return nil, errors.New("s3store: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile in the shared credentials file (AWS_PROFILE), or run with an instance or container role")
	}
	return creds, nil
}
