package agent

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestServeScript runs the serve script under dash and busybox sh. With a
// cached agent of either key it execs it with PATH empty, which shows it
// runs no uname or id; without one, or when asked to probe, it prints the
// probe line, naming the cache directory .ferry-<uid>. A directory of
// another name (the SSH transport's .ferry-exec- files share the prefix)
// is not looked in.
func TestServeScript(t *testing.T) {
	type sh struct{ name, bin string }
	var shells []sh
	for _, s := range []sh{{"dash", "dash"}, {"busybox", "busybox"}} {
		p, err := exec.LookPath(s.bin)
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not found: %v", s.bin, err)
			}
			t.Logf("skipping %s: %v", s.name, err)
			continue
		}
		shells = append(shells, sh{s.name, p})
	}
	agentScript := "#!/bin/sh\necho \"agent $0 $1\"\n"
	tests := []struct {
		name    string
		install []string // keys with an executable agent in the cache
		plain   []string // keys with a file that is not executable
		keys    [2]string
		what    string
		want    string // the agent's key that runs, or "" for the probe
		foreign bool   // the cache directory is another user's (as root only)
		dir     string // the cache directory's name, if not .ferry-<uid>
	}{
		{"amd64 key", []string{"k1"}, nil, [2]string{"k1", "k2"}, "serve", "k1", false, ""},
		{"arm64 key", []string{"k2"}, nil, [2]string{"k1", "k2"}, "serve", "k2", false, ""},
		{"no build for the cached key", []string{"k1"}, nil, [2]string{"-", "k2"}, "serve", "", false, ""},
		{"not executable", nil, []string{"k1"}, [2]string{"k1", "k2"}, "serve", "", false, ""},
		{"nothing cached", nil, nil, [2]string{"k1", "k2"}, "serve", "", false, ""},
		{"probe asked for", []string{"k1"}, nil, [2]string{"k1", "k2"}, "probe", "", false, ""},
		{"another user's directory", []string{"k1"}, nil, [2]string{"k1", "k2"}, "serve", "", true, ""},
		{"not named by a uid", []string{"k1"}, nil, [2]string{"k1", "k2"}, "serve", "", false, ".ferry-exec-" + uidString()},
	}
	for _, s := range shells {
		for _, tt := range tests {
			t.Run(s.name+"/"+tt.name, func(t *testing.T) {
				tmp := t.TempDir()
				dir := filepath.Join(tmp, ".ferry-"+uidString())
				if tt.dir != "" {
					dir = filepath.Join(tmp, tt.dir)
				}
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				for _, k := range tt.install {
					if err := os.WriteFile(filepath.Join(dir, "agent-"+k), []byte(agentScript), 0o700); err != nil {
						t.Fatal(err)
					}
				}
				if tt.foreign {
					if os.Geteuid() != 0 {
						t.Skip("needs root to give the directory to another user")
					}
					// Named as ours, as another user could make it first
					// in a shared /tmp.
					if err := os.Chown(dir, 65534, 65534); err != nil {
						t.Fatal(err)
					}
				}
				for _, k := range tt.plain {
					if err := os.WriteFile(filepath.Join(dir, "agent-"+k), []byte(agentScript), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				argv := []string{"-c", serveScript, "sh", tt.keys[0], tt.keys[1], tt.what}
				if s.name == "busybox" {
					argv = append([]string{"sh"}, argv...)
				}
				cmd := exec.Command(s.bin, argv...)
				env := []string{"TMPDIR=" + tmp}
				if tt.want != "" {
					env = append(env, "PATH=/nonexistent")
				} else {
					env = append(env, "PATH="+os.Getenv("PATH"))
				}
				cmd.Env = env
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("%v: %v, stderr %q", s.bin, err, stderr.String())
				}
				got := strings.TrimSpace(string(out))
				if tt.want != "" {
					if want := "agent " + filepath.Join(dir, "agent-"+tt.want) + " serve"; got != want {
						t.Fatalf("output %q, want %q", got, want)
					}
					return
				}
				if want := filepath.Join(tmp, ".ferry-"+uidString()); !strings.HasPrefix(got, "FERRY-PROBE ") || !strings.HasSuffix(got, " "+want) {
					t.Fatalf("output %q, want the probe line naming %s", got, want)
				}
			})
		}
	}
}

func uidString() string { return strconv.Itoa(os.Getuid()) }
