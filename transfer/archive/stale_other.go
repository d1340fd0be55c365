//go:build !unix

package archive

import (
	"os"
	"time"
)

// lockStage has no flock to take here: the staging directory goes
// unmarked, and RemoveStaleStaging (which cannot tell the live from the
// dead) leaves it to its owner.
func lockStage(string) (*os.File, error) { return nil, nil }

func removeIfStale(string, time.Time) (bool, error) { return false, nil }

func removeIfOrphan(string, int) (bool, error) { return false, nil }

// removeWhenFree cannot tell whether an owner still holds dir: the
// caller asked for its own directory by name, so it goes.
func removeWhenFree(dir string) (bool, error) { return true, RemoveTree(dir) }
