package posix_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/transfer/posix"
)

// TestScriptSyntax parses each one-line script with every shell that may
// run it.
func TestScriptSyntax(t *testing.T) {
	shells := [][]string{{"sh"}, {"bash", "--posix"}, {"busybox", "sh"}, {"dash"}}
	for name, s := range posix.Scripts {
		if strings.ContainsAny(s, "\n\r\x00") {
			t.Errorf("%s: script holds a newline", name)
		}
		for _, sh := range shells {
			if _, err := exec.LookPath(sh[0]); err != nil {
				if os.Getenv("CI") != "" {
					t.Fatalf("%s: %v", sh[0], err)
				}
				t.Logf("skip %s: %v", sh[0], err)
				continue
			}
			argv := append(append([]string{}, sh[1:]...), "-n", "-c", s)
			if out, err := exec.Command(sh[0], argv...).CombinedOutput(); err != nil {
				t.Errorf("%s: %s -n: %v: %s", name, sh[0], err, out)
			}
		}
	}
}
