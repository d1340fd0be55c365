package session

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func hash10(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:10]
}

func TestTaskKey(t *testing.T) {
	long := strings.Repeat("a", 40) + "/" + strings.Repeat("b", 20)
	cases := []struct {
		repo, task, want string
	}{
		{"rtzll/rascal", "42", "rtzll-rascal-42-" + hash10("rtzll/rascal::42")},
		{"  rtzll/rascal ", " 42\t", "rtzll-rascal-42-" + hash10("rtzll/rascal::42")},
		{"Org/Repo.Name", "Fix: Bug #7", "org-repo-name-fix-bug-7-" + hash10("Org/Repo.Name::Fix: Bug #7")},
		{"--/--", "__", "task-" + hash10("--/--::__")},
		{"", "", "task-" + hash10("::")},
		{"ünï/cødé", "1", "n-c-d-1-" + hash10("ünï/cødé::1")},
		// Cut to 45 bytes, then trimmed of a trailing "-".
		{long, "9", strings.Repeat("a", 40) + "-bbbb-" + hash10(long+"::9")},
		{strings.Repeat("a", 44) + "/x", "1", strings.Repeat("a", 44) + "-" + hash10(strings.Repeat("a", 44)+"/x::1")},
	}
	for _, tc := range cases {
		if got := TaskKey(tc.repo, tc.task); got != tc.want {
			t.Errorf("TaskKey(%q, %q) = %q, want %q", tc.repo, tc.task, got, tc.want)
		}
	}
}
