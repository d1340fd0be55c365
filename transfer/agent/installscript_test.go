package agent

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// TestInstallScriptPrunes runs the install script with coreutils and with
// busybox's applets in a cache holding older builds: it installs the new
// build, keeps the cacheKeep most recently installed ones (the new one
// among them, even where the others' times are ahead of the clock) with
// their kept digests, and removes the older builds and their digests. A
// link named as a build is removed, not what it points at; the temporary
// file of an install whose process is gone is removed, one in flight is
// not; names not of the cache's form are left alone.
func TestInstallScriptPrunes(t *testing.T) {
	keep, err := strconv.Atoi(cacheKeep)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tools  string
		future bool // the older builds' times are ahead of the clock
	}{{"coreutils", false}, {"busybox", false}, {"coreutils", true}} {
		t.Run(fmt.Sprintf("%s/future=%v", tc.tools, tc.future), func(t *testing.T) {
			shell, path := scriptShell(t, tc.tools)
			tmp := t.TempDir()
			dir := filepath.Join(tmp, ".ferry-"+uidString())
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			outside := filepath.Join(tmp, "outside")
			if err := os.WriteFile(outside, []byte("not the cache's"), 0o600); err != nil {
				t.Fatal(err)
			}
			// Older builds, oldest first, installed an hour apart; the
			// oldest is a link to a file outside the cache.
			now := time.Now()
			var old []string
			for i := range keep + 2 {
				name := fmt.Sprintf("agent-%024x", i+1)
				old = append(old, name)
				p := filepath.Join(dir, name)
				at := now.Add(-time.Duration(keep+3-i) * time.Hour)
				if tc.future {
					at = now.Add(time.Duration(i+1) * time.Hour)
				}
				if i == 0 {
					if err := os.Symlink(outside, p); err != nil {
						t.Fatal(err)
					}
					if err := transfertest.Lchtimes(p, at); err != nil {
						t.Fatal(err)
					}
				} else {
					writeAt(t, p, at)
				}
				writeAt(t, filepath.Join(dir, "."+name+".digest"), at)
			}
			// The temporary files of two installs: one whose process
			// runs (this test's), one whose process is gone.
			live := fmt.Sprintf(".agent-%024x.%d", 9, os.Getpid())
			writeAt(t, filepath.Join(dir, fmt.Sprintf(".agent-%024x.%d", 9, transfertest.DeadPID(t))), now)
			others := []string{"agent-notes.txt", "agent-", live, ".agent-0123.x1", "README"}
			for _, name := range others {
				writeAt(t, filepath.Join(dir, name), now.Add(-100*time.Hour))
			}

			const key = "00000000000000000000ffff"
			cmd := exec.Command(shell, "-c", installScript, "sh", dir, key, "raw")
			cmd.Env = []string{"PATH=" + path, "TMPDIR=" + tmp}
			cmd.Stdin = strings.NewReader("#!/bin/sh\n")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("install: %v, stderr %q", err, stderr.String())
			}
			if got, err := os.ReadFile(filepath.Join(dir, "agent-"+key)); err != nil || string(got) != "#!/bin/sh\n" {
				t.Fatalf("installed agent: %q, %v", got, err)
			}
			var want []string
			for _, name := range old[len(old)-(keep-1):] {
				want = append(want, name, "."+name+".digest")
			}
			want = append(append(want, "agent-"+key), others...)
			slices.Sort(want)
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range ents {
				got = append(got, e.Name())
			}
			if !slices.Equal(got, want) {
				t.Errorf("cache after the install:\n%q\nwant\n%q", got, want)
			}
			if b, err := os.ReadFile(outside); err != nil || string(b) != "not the cache's" {
				t.Errorf("the link's target: %q, %v; want it untouched", b, err)
			}
		})
	}
}

// writeAt writes a small file p, executable, modified at at.
func writeAt(t *testing.T, p string, at time.Time) {
	t.Helper()
	if err := os.WriteFile(p, []byte("old"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, at, at); err != nil {
		t.Fatal(err)
	}
}

// scriptShell returns the sh to run a script with and its PATH: the
// system's for tools "coreutils", only busybox's applets for "busybox".
func scriptShell(t *testing.T, tools string) (shell, path string) {
	t.Helper()
	if tools == "busybox" {
		path = busyboxPath(t, "sh", "ls", "rm", "mv", "mkdir", "chmod", "cat")
		return filepath.Join(path, "sh"), path
	}
	shell, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	return shell, os.Getenv("PATH")
}

// busyboxPath returns a directory of busybox's applets named, for a PATH
// of only those.
func busyboxPath(t *testing.T, applets ...string) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("busybox not found: %v", err)
	}
	dir := t.TempDir()
	for _, a := range applets {
		if err := os.Symlink(bb, filepath.Join(dir, a)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestInstallScriptStopped stops an install halfway as ferry does after a
// cut relay (TERM to what the exec started), and hangs one up: neither
// leaves its temporary file, nor an agent under the name the serve
// script runs, and each has removed an earlier killed install's file.
func TestInstallScriptStopped(t *testing.T) {
	for _, tc := range []struct {
		tools string
		sig   syscall.Signal
	}{{"coreutils", syscall.SIGTERM}, {"busybox", syscall.SIGTERM}, {"coreutils", syscall.SIGHUP}} {
		t.Run(fmt.Sprintf("%s/%v", tc.tools, tc.sig), func(t *testing.T) {
			shell, path := scriptShell(t, tc.tools)
			// The temporary file of an install killed outright earlier,
			// which this one removes before it is stopped in turn.
			dir := filepath.Join(t.TempDir(), ".ferry-"+uidString())
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			writeAt(t, filepath.Join(dir, fmt.Sprintf(".agent-%024x.%d", 7, transfertest.DeadPID(t))), time.Now())
			const key = "00000000000000000000eeee"
			cmd := exec.Command(shell, "-c", installScript, "sh", dir, key, "raw")
			cmd.Env = []string{"PATH=" + path}
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { in.Close(); cmd.Wait() })
			if _, err := in.Write(bytes.Repeat([]byte("x"), 4096)); err != nil {
				t.Fatal(err)
			}
			// Halfway: the temporary file holds what was written so far.
			temp := filepath.Join(dir, fmt.Sprintf(".agent-%s.%d", key, cmd.Process.Pid))
			for i := 0; ; i++ {
				if fi, err := os.Stat(temp); err == nil && fi.Size() == 4096 {
					break
				}
				if i == 500 {
					t.Fatalf("no 4096-byte %s after 5s", temp)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := syscall.Kill(-cmd.Process.Pid, tc.sig); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err == nil {
				t.Fatalf("the stopped install exited 0")
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) != 0 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("after the stop the cache holds %q, want nothing", names)
			}
		})
	}
}

// TestInstallScriptUnremovable: what the pruning cannot remove (a
// directory under an old build's name, or under a gone install's
// temporary name, as a hostile sandbox could make) neither fails the
// install nor stops the pruning of the rest.
func TestInstallScriptUnremovable(t *testing.T) {
	for _, tools := range []string{"coreutils", "busybox"} {
		t.Run(tools, func(t *testing.T) {
			shell, path := scriptShell(t, tools)
			tmp := t.TempDir()
			dir := filepath.Join(tmp, ".ferry-"+uidString())
			now := time.Now()
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			// Five older builds, an hour apart, and a directory under a
			// build's name between the second and third oldest: the two
			// oldest must go after the directory would not.
			for i := 1; i <= 5; i++ {
				writeAt(t, filepath.Join(dir, fmt.Sprintf("agent-%024x", i)), now.Add(-time.Duration(7-i)*time.Hour))
			}
			blocker := filepath.Join(dir, fmt.Sprintf("agent-%024x", 0))
			if err := os.Mkdir(blocker, 0o700); err != nil {
				t.Fatal(err)
			}
			writeAt(t, filepath.Join(blocker, "x"), now)
			if at := now.Add(-270 * time.Minute); os.Chtimes(blocker, at, at) != nil {
				t.Fatal("date the directory")
			}
			temp := filepath.Join(dir, fmt.Sprintf(".agent-%024x.%d", 9, transfertest.DeadPID(t)))
			gone := filepath.Join(dir, fmt.Sprintf(".agent-%024x.%d", 8, transfertest.DeadPID(t)))
			writeAt(t, gone, now)
			if err := os.Mkdir(temp, 0o700); err != nil {
				t.Fatal(err)
			}
			writeAt(t, filepath.Join(temp, "x"), now)

			const key = "00000000000000000000dddd"
			cmd := exec.Command(shell, "-c", installScript, "sh", dir, key, "raw")
			cmd.Env = []string{"PATH=" + path}
			cmd.Stdin = strings.NewReader("#!/bin/sh\n")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("install: %v, stderr %q", err, stderr.String())
			}
			got, _ := filepath.Glob(filepath.Join(dir, "agent-*"))
			want := []string{blocker, filepath.Join(dir, "agent-"+key)}
			for i := 3; i <= 5; i++ {
				want = append(want, filepath.Join(dir, fmt.Sprintf("agent-%024x", i)))
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("cached builds\n%q\nwant\n%q", got, want)
			}
			if _, err := os.Stat(temp); err != nil {
				t.Errorf("the directory under a temporary name: %v, want it left", err)
			}
			if _, err := os.Stat(gone); !os.IsNotExist(err) {
				t.Errorf("a gone install's temporary file beside it: %v, want it removed", err)
			}
		})
	}
}
