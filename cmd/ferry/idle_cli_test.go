package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestIdleTimeoutCLI: `ferry cp` and `ferry pull` end with exit 1 and a
// message naming the sandbox and the timeout when the sandbox's tar (a
// hostile one, planted through its login profile) goes silent for
// --idle-timeout; --idle-timeout 0 waits; a negative one is a usage error.
func TestIdleTimeoutCLI(t *testing.T) {
	realTar, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("no tar on this machine:", err)
	}
	g := activeGateway(t)
	wantOK(t, runFerry(t, nil, "sandbox", "create", "box", "-q"))
	box := filepath.Join(g.Root, "box")
	writeFile(t, filepath.Join(box, "x", "file"), []byte("real"), 0o644)
	writeFile(t, filepath.Join(box, "rascal-meta", "meta.json"), []byte("{}"), 0o644)
	writeFile(t, filepath.Join(box, ".profile"), []byte("export PATH=\"$HOME/bin:$PATH\"\n"), 0o644)
	plant := func(script string) {
		writeFile(t, filepath.Join(box, "bin", "tar"), []byte("#!/bin/sh\n[ \"$1\" = --version ] && exit 0\n"+script+"\n"), 0o755)
	}

	plant("printf x; exec sleep 20")
	for _, args := range [][]string{
		{"cp", "--idle-timeout", "300ms", "box:x", filepath.Join(t.TempDir(), "got")},
		{"pull", "--idle-timeout", "300ms", "box", "--out", t.TempDir()},
	} {
		t.Run(args[0], func(t *testing.T) {
			start := time.Now()
			r := runFerry(t, nil, append([]string{"-q", "--mode", "posix"}, args...)...)
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("took %v with --idle-timeout 300ms", took)
			}
			wantFailure(t, r, "transfer idle", "box", "300ms")
		})
	}

	// A tar that thinks for 1.5s before it sends a proper archive.
	plant("sleep 1.5; exec '" + realTar + "' \"$@\"")
	r := runFerry(t, nil, "-q", "--mode", "posix", "cp", "--idle-timeout", "1s", "box:x", filepath.Join(t.TempDir(), "got"))
	wantFailure(t, r, "transfer idle", "1s")
	got := filepath.Join(t.TempDir(), "got")
	wantOK(t, runFerry(t, nil, "-q", "--mode", "posix", "cp", "--idle-timeout", "0", "box:x", got))
	if b, err := os.ReadFile(filepath.Join(got, "file")); err != nil || string(b) != "real" {
		t.Errorf("after --idle-timeout 0: %q, %v", b, err)
	}

	r = runFerry(t, nil, "cp", "--idle-timeout", "-1s", "box:x", t.TempDir())
	if r.code != 2 || !strings.Contains(r.stderr, "--idle-timeout") {
		t.Errorf("negative --idle-timeout: exit %d, %q; want a usage error", r.code, r.stderr)
	}
}
