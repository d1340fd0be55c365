package archive

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A staging directory is live while its owner holds an exclusive flock(2)
// on the marker file lockName inside it, until the directory has been
// removed. It is made under a name of its own followed by "." and the
// owner's pid, marked and locked there, and only then renamed to its
// name: so under its name a staging directory always has a marker, and
// one whose marker anyone else can lock is one whose owner is gone:
// killed (SIGKILL, a relay that took the process group with it), or dead
// with its machine. Such a directory is stale, and the next Extract that
// stages into the same parent removes it. The lock is the kernel's, not a
// pid: it dies with its process, is never inherited by a child (the file
// is close-on-exec), and a pid reused by a stranger cannot keep a stale
// directory alive or make a live one look dead. Under its first name
// (microseconds, but a kill can land there) the pid tells: a directory
// whose pid no process has is stale; one whose pid was reused stays until
// that process is gone.
//
// Only a directory that is provably ferry's is removed: a real directory
// (a symlink is never followed) owned by this user, named StagingPrefix and
// hex digits (what ferry names them), holding a marker that starts with
// stagingMagic, or named so and then "." and a pid, holding no more than
// a marker (written or not) and its pid gone. A directory of the
// name without a marker (one made by a ferry older than the marker) is
// removed only once it holds nothing but what such a directory holds
// ("tree") and has not changed for staleNoMarker.
const (
	lockName     = "lock"
	stagingMagic = "ferry staging directory\n"
	// staleNoMarker is how long a staging directory without a marker
	// must have been unchanged before it counts as stale: a live one,
	// made by a ferry of before the marker, would be removed under its
	// transfer past this.
	staleNoMarker = time.Hour
	// maxStagingSuffix bounds the hex digits of a staging name.
	maxStagingSuffix = 64
)

// IsStagingName reports whether name is one ferry gives a staging
// directory: StagingPrefix and 1 to 64 lower-case hex digits (the host's
// random tags are hex, os.MkdirTemp's decimal). Only such names are ever
// swept.
func IsStagingName(name string) bool {
	s, ok := strings.CutPrefix(name, StagingPrefix)
	if !ok || s == "" || len(s) > maxStagingSuffix {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// stagingTemp splits the first name of a staging directory (see above)
// into its name and its owner's pid.
func stagingTemp(name string) (final string, pid int, ok bool) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 || !IsStagingName(name[:i]) {
		return "", 0, false
	}
	pid, err := strconv.Atoi(name[i+1:])
	if err != nil || pid <= 0 || strconv.Itoa(pid) != name[i+1:] {
		return "", 0, false
	}
	return name[:i], pid, true
}

// RemoveStaleStaging removes the stale staging directories directly in
// parent: those whose owner is gone (see the lock above) and, without a
// marker, unchanged for an hour. It never removes a live one, nor
// anything that is not provably a staging directory, and follows no
// symlink. A missing parent holds none. It returns how many it removed;
// an error is the first it met (reading parent, or removing one), and the
// others are still tried.
// Extract calls it on the directory it stages in, so a caller need not;
// it is exported for a sandbox or a host that wants to clean up without
// staging.
//
// Limitations: only on unix systems (elsewhere it removes nothing: there
// is no flock to tell the live from the dead). A directory whose marker
// was made on another machine sharing the file system (NFS) is judged by
// that file system's flock, which NFS emulates with its own locks.
func RemoveStaleStaging(ctx context.Context, parent string) (int, error) {
	d, err := os.Open(parent)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("remove stale staging in %s: %w", parent, err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return 0, fmt.Errorf("remove stale staging in %s: %w", parent, err)
	}
	n := 0
	var first error
	now := time.Now()
	for _, name := range names {
		var removed bool
		switch _, pid, temp := stagingTemp(name); {
		case temp:
			removed, err = removeIfOrphan(filepath.Join(parent, name), pid)
		case IsStagingName(name):
			removed, err = removeIfStale(filepath.Join(parent, name), now)
		default:
			continue
		}
		if cerr := ctx.Err(); cerr != nil {
			return n, cerr
		}
		if removed {
			n++
		}
		if err != nil && first == nil {
			first = fmt.Errorf("remove stale staging directory %s: %w", filepath.Join(parent, name), err)
		}
	}
	return n, first
}

// ErrStagingBusy matches a RemoveStaging whose directory stayed live (its
// owner still holding it) until the context ended.
var ErrStagingBusy = errors.New("transfer: staging directory in use")

// RemoveStaging removes the staging directory dir (a StagingPrefix name,
// as ExtractOptions.Staging gives it) once its owner has let go of it: a
// host whose connection to a remote Extract broke asks for this, while
// that Extract may still be cleaning up after itself (then dir is gone by
// the time the lock is free, which is success). A directory that Extract
// was still making under its first name (dir.PID) goes too, once that
// process is gone. It waits, polling, until ctx ends, and then fails with
// ErrStagingBusy. A missing dir is no error.
func RemoveStaging(ctx context.Context, dir string) error {
	if !IsStagingName(filepath.Base(dir)) {
		return fmt.Errorf("remove staging directory %s: %w: not a %s name", dir, ErrUnsafePath, StagingPrefix)
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		done, err := removeWhenFree(dir)
		if done || err != nil {
			if err != nil {
				return fmt.Errorf("remove staging directory %s: %w", dir, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remove staging directory %s: %w: %w", dir, ErrStagingBusy, ctx.Err())
		case <-t.C:
		}
	}
}

// RemoveTree removes dir with whatever is left in it, as os.RemoveAll
// does, also where a stream left directories without write permission:
// on failure those are made writable and it tries once more. WalkDir
// follows no symlink, and RemoveAll removes a symlink, not its target.
func RemoveTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
