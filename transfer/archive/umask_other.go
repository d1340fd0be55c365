//go:build !linux

package archive

// createMask: only Linux tells the umask without setting it (see
// umask_linux.go); elsewhere every file is chmodded after its creation.
func createMask(string) (uint32, bool) { return 0, false }
