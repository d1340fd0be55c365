package archive_test

import (
	"archive/tar"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferry-dev/ferry/transfer/archive"
)

// setDefaultACL gives dir the default ACL user::rwx, group::r-x,
// other::---: a file created below it gets the mode asked for masked by
// that, whatever the umask.
func setDefaultACL(t *testing.T, dir string) {
	t.Helper()
	// The kernel's posix_acl_xattr: version 2, then tag, perm, id per
	// entry, little-endian, in tag order.
	acl := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range []struct{ tag, perm uint16 }{{0x01, 7}, {0x04, 5}, {0x20, 0}} {
		acl = binary.LittleEndian.AppendUint16(acl, e.tag)
		acl = binary.LittleEndian.AppendUint16(acl, e.perm)
		acl = binary.LittleEndian.AppendUint32(acl, 0xffffffff)
	}
	if err := unix.Setxattr(dir, "system.posix_acl_default", acl, 0); err != nil {
		t.Fatalf("set a default ACL on %s: %v", dir, err)
	}
}

// TestExtractModesUnderUmask: a file is created with its mode where the
// umask leaves every bit of it, and chmodded where not; either way, and
// under a default ACL, which masks modes whatever the umask (and makes
// the extractor chmod every file), modes come out exact.
func TestExtractModesUnderUmask(t *testing.T) {
	b := newBuilder()
	want := map[string]os.FileMode{}
	for _, m := range []os.FileMode{0o644, 0o600, 0o755, 0o444, 0, 0o777, 0o666, 0o620, 0o604, 0o640, 0o700} {
		name := fmt.Sprintf("f%03o", m)
		b.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(m), Size: 1}, "x")
		want[name] = m
	}
	b.header(&tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o750}, "")
	b.header(&tar.Header{Typeflag: tar.TypeReg, Name: "d/f", Mode: 0o664, Size: 1}, "x")
	want["d"], want["d/f"] = os.ModeDir|0o750, 0o664
	data := b.end()
	tests := []struct {
		name      string
		umask     int
		acl       bool
		wantExact bool // createMask: creation sets modes less the umask
	}{
		{"umask 022", 0o022, false, true},
		{"umask 077", 0o077, false, true},
		{"umask 0", 0, false, true},
		{"umask 002", 0o002, false, true},
		{"default ACL", 0o022, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := syscall.Umask(tt.umask)
			t.Cleanup(func() { syscall.Umask(old) })
			parent := t.TempDir()
			if tt.acl {
				setDefaultACL(t, parent)
			}
			umask, exact := archive.CreateMask(parent)
			if exact != tt.wantExact || exact && umask != uint32(tt.umask) {
				t.Fatalf("CreateMask = %03o, %v; want %03o, %v", umask, exact, tt.umask, tt.wantExact)
			}
			dest := filepath.Join(parent, "out")
			if _, err := extract(t, data, dest, archive.ExtractOptions{}); err != nil {
				t.Fatal(err)
			}
			wantModes(t, dest, want)
		})
	}
}

// TestCreateMaskNoDir: a tree that cannot be asked for its ACL gets
// every file chmodded.
func TestCreateMaskNoDir(t *testing.T) {
	_, exact := archive.CreateMask(filepath.Join(t.TempDir(), "missing"))
	if exact {
		t.Error("CreateMask of a missing directory: exact")
	}
}
