//go:build unix

package archive

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestOpenListed: a Writer reads only the regular file it listed. A FIFO
// put in its place is refused at once (a blocking open would wait for a
// writer that never comes), and so is another file or a directory.
func TestOpenListed(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("listed"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := openListed(p, fi)
	if err != nil {
		t.Fatalf("the listed file: %v", err)
	}
	f.Close()

	tests := []struct {
		name    string
		replace func(string) error
	}{
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"another file", func(p string) error { return os.WriteFile(p, []byte("other"), 0o644) }},
		{"directory", func(p string) error { return os.Mkdir(p, 0o755) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The listed file lives on beside it, so that what replaces it
			// cannot reuse its inode number.
			if err := os.Rename(p, p+".kept"); err != nil {
				t.Fatal(err)
			}
			if err := tt.replace(p); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				os.Remove(p)
				os.Rename(p+".kept", p)
			})
			done := make(chan error, 1)
			go func() {
				f, err := openListed(p, fi)
				if err == nil {
					f.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, errReplaced) {
					t.Fatalf("err = %v, want errReplaced", err)
				}
			case <-time.After(10 * time.Second):
				// Unblock the open so that the goroutine ends.
				if w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
				<-done
				t.Fatal("openListed hung on what replaced the file")
			}
		})
	}
}
