package server

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// Follow's limits and timings.
const (
	// maxFollowFiles bounds one request: every file holds a descriptor
	// and a watch for the life of the stream.
	maxFollowFiles = 64
	// maxWakeBatch bounds how many queued file-system events one wake
	// takes before the files are read again.
	maxWakeBatch = 1024
)

// followRecheck is the safety re-check: the files are read again this long
// after the last look even without an event, against events the kernel
// dropped or never sends (network file systems, an overflowed queue). When
// no watcher can be made at all (the inotify instance limit), followPoll is
// the interval instead. Variables so that tests can shorten them.
var (
	followRecheck = 2 * time.Second
	followPoll    = 500 * time.Millisecond
)

// Follow streams each requested file from its offset, then what is
// appended to it, woken by fsnotify events on the files' directories (and,
// while a directory is missing, on its nearest existing ancestor), with a
// slow re-check against missed events. A file that does not exist yet is
// picked up when it appears. Limitations: a file that is truncated and
// regrown past its offset between two looks cannot be told from one that
// was appended to; a file that shrinks or is replaced ends the stream with
// codes.DataLoss (see ErrShrunk) rather than being restarted, since only
// the host knows what to do with the copy it has. With stop_when, the
// stream ends with OK once that path exists and every file has then been
// read to its end; without it, only the caller ends the stream.
func (s *server) Follow(req *agentv1.FollowRequest, stream agentv1.Agent_FollowServer) error {
	ctx := stream.Context()
	if err := checkFollowRequest(req); err != nil {
		return err
	}
	files := make([]*followed, len(req.GetFiles()))
	for i, f := range req.GetFiles() {
		files[i] = &followed{index: uint32(i), name: f.GetPath(), path: s.abs(f.GetPath()), off: f.GetOffset()}
	}
	defer func() {
		for _, f := range files {
			f.close()
		}
	}()
	stop := ""
	if req.GetStopWhen() != "" {
		stop = s.abs(req.GetStopWhen())
	}

	w := newWaker(s, files, stop)
	defer w.close()
	for {
		// The stop path is looked at before the files are read: the files
		// are then read to an end that is after the moment it existed.
		stopped := false
		if stop != "" {
			if _, err := os.Stat(stop); err == nil {
				stopped = true
			}
		}
		if err := drain(ctx, stream, files); err != nil {
			return err
		}
		if stopped {
			return nil
		}
		if err := w.wait(ctx); err != nil {
			return err
		}
	}
}

func checkFollowRequest(req *agentv1.FollowRequest) error {
	if len(req.GetFiles()) == 0 {
		return status.Error(codes.InvalidArgument, "follow: no files")
	}
	if len(req.GetFiles()) > maxFollowFiles {
		return status.Errorf(codes.InvalidArgument, "follow: %d files, at most %d", len(req.GetFiles()), maxFollowFiles)
	}
	for _, f := range req.GetFiles() {
		if err := checkFollowPath(f.GetPath()); err != nil {
			return err
		}
		if f.GetOffset() < 0 {
			return status.Errorf(codes.InvalidArgument, "follow %s: negative offset %d", f.GetPath(), f.GetOffset())
		}
	}
	if p := req.GetStopWhen(); p != "" {
		return checkFollowPath(p)
	}
	return nil
}

func checkFollowPath(p string) error {
	if p == "" || strings.ContainsAny(p, "\x00\n") {
		return status.Errorf(codes.InvalidArgument, "follow: invalid path %q", p)
	}
	return nil
}

// followed is one file of a Follow stream: open once it exists, and the
// offset up to which it has been sent.
type followed struct {
	index uint32
	name  string // as requested, for errors
	path  string
	f     *os.File
	off   int64
}

func (f *followed) close() {
	if f.f != nil {
		f.f.Close()
		f.f = nil
	}
}

// drain reads every file to its current end, one chunk from each in turn
// so that a busy file does not hold the others back.
func drain(ctx context.Context, stream agentv1.Agent_FollowServer, files []*followed) error {
	for {
		if err := ctx.Err(); err != nil {
			return status.FromContextError(err).Err()
		}
		sent := false
		for _, f := range files {
			n, err := f.sendChunk(stream)
			if err != nil {
				return err
			}
			sent = sent || n > 0
		}
		if !sent {
			return nil
		}
	}
}

// sendChunk sends at most wire.ChunkSize bytes from f's offset and reports how
// many it sent. At the end of the file it checks that the path still names
// the file it has open.
func (f *followed) sendChunk(stream agentv1.Agent_FollowServer) (int, error) {
	if f.f == nil {
		// O_NONBLOCK: opening a FIFO must not wait for a writer; a
		// regular file ignores it.
		fd, err := os.OpenFile(f.path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		if err != nil {
			return 0, status.Errorf(codes.FailedPrecondition, "follow %s: %v", f.name, err)
		}
		st, err := fd.Stat()
		if err != nil {
			fd.Close()
			return 0, status.Errorf(codes.Internal, "follow %s: %v", f.name, err)
		}
		if !st.Mode().IsRegular() {
			fd.Close()
			return 0, status.Errorf(codes.FailedPrecondition, "follow %s: not a regular file (%s)", f.name, st.Mode().Type())
		}
		f.f = fd
	}
	st, err := f.f.Stat()
	if err != nil {
		return 0, status.Errorf(codes.Internal, "follow %s: %v", f.name, err)
	}
	size := st.Size()
	if size < f.off {
		return 0, status.Errorf(codes.DataLoss, "follow %s: %d bytes, shorter than offset %d", f.name, size, f.off)
	}
	if size == f.off {
		// Caught up with the open file: is it still the one at the path?
		// A missing path is not a replacement: the file may be unlinked
		// and still written, and a new one is caught when it appears.
		cur, err := os.Stat(f.path)
		if err == nil && !os.SameFile(cur, st) {
			return 0, status.Errorf(codes.DataLoss, "follow %s: replaced by another file", f.name)
		}
		return 0, nil
	}
	// A fresh buffer per message: gRPC may hold a sent message after
	// SendMsg returns. Flow control bounds how many are in flight.
	buf := make([]byte, min(size-f.off, wire.ChunkSize))
	n, err := f.f.ReadAt(buf, f.off)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, status.Errorf(codes.Internal, "follow %s: %v", f.name, err)
	}
	if n == 0 {
		return 0, nil
	}
	if err := stream.Send(&agentv1.FollowResponse{File: f.index, Offset: f.off, Data: buf[:n]}); err != nil {
		return 0, err
	}
	f.off += int64(n)
	return n, nil
}

// waker blocks until something may have changed in the followed files.
type waker struct {
	s       *server
	w       *fsnotify.Watcher // nil: poll at followPoll
	dirs    []string          // directories the files and the stop path live in
	watched map[string]bool   // paths added to w
	ready   map[string]bool   // dirs watched themselves, not through an ancestor
	// degraded: some directory cannot be watched (no permission, the
	// watch limit), so wait polls at followPoll.
	degraded bool
}

func newWaker(s *server, files []*followed, stop string) *waker {
	k := &waker{s: s, watched: map[string]bool{}, ready: map[string]bool{}}
	seen := map[string]bool{}
	add := func(p string) {
		d := filepath.Dir(p)
		if !seen[d] {
			seen[d] = true
			k.dirs = append(k.dirs, d)
		}
	}
	for _, f := range files {
		add(f.path)
	}
	if stop != "" {
		add(stop)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Warn("follow: no file-system watcher, polling", "interval", followPoll, "err", err)
		return k
	}
	k.w = w
	k.watch()
	return k
}

// watch adds a watch on every directory not yet watched itself, or on its
// nearest existing ancestor while it is missing, so that its creation wakes
// the stream and the next call watches it.
func (k *waker) watch() {
	if k.w == nil {
		return
	}
	for _, d := range k.dirs {
		// A directory created after its Add failed and before its
		// parent's Add succeeded sends no event: when a walk adds a
		// watch, walk again. Each walk that adds one adds a new one, so
		// this ends.
		for !k.ready[d] && k.watchUp(d) {
		}
		k.ready[d] = k.ready[d] || k.watched[d]
	}
}

// watchUp watches d, or its nearest existing ancestor, and reports whether
// it added a watch.
func (k *waker) watchUp(d string) bool {
	for p := d; ; p = filepath.Dir(p) {
		if k.watched[p] {
			return false
		}
		err := k.w.Add(p)
		if err == nil {
			k.watched[p] = true
			return true
		}
		if !errors.Is(err, fs.ErrNotExist) || filepath.Dir(p) == p {
			k.s.log.Warn("follow: watch failed, polling", "dir", p, "interval", followPoll, "err", err)
			k.degraded = true
			k.ready[d] = true // not retried: polling covers it
			return false
		}
	}
}

// wait returns when an event arrives, the re-check interval passes, or ctx
// ends (with its status).
func (k *waker) wait(ctx context.Context) error {
	if k.w == nil || k.degraded {
		t := time.NewTimer(followPoll)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-t.C:
			return nil
		}
	}
	t := time.NewTimer(followRecheck)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-t.C:
	case _, ok := <-k.w.Events:
		if !ok {
			return status.Error(codes.Internal, "follow: watcher closed")
		}
	case err, ok := <-k.w.Errors:
		if !ok {
			return status.Error(codes.Internal, "follow: watcher closed")
		}
		// An overflowed queue lost events: reading every file again
		// makes up for them.
		k.s.log.Debug("follow: watcher error", "err", err)
	}
	// Take what else is queued, so that a burst of writes costs one read.
	for range maxWakeBatch {
		select {
		case <-k.w.Events:
			continue
		case <-k.w.Errors:
			continue
		default:
		}
		break
	}
	k.watch()
	return nil
}

func (k *waker) close() {
	if k.w != nil {
		k.w.Close()
	}
}
