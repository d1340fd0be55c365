package rascal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadResult: the result reported for a run is meta.json's, under the
// run's own id; a meta.json the sandbox made to name another run, or one
// too big or not JSON, is no report at all.
func TestReadResult(t *testing.T) {
	const id = "run_0123456789abcdef"
	for _, tc := range []struct {
		name, meta string
		want       RunResult
		err        string
	}{
		{"whole", `{"run_id":"run_0123456789abcdef","pr_number":7,"pr_url":"u","head_sha":"s","task_session_id":"t","exit_code":0}`,
			RunResult{RunID: id, PRNumber: 7, PRURL: "u", HeadSHA: "s", TaskSessionID: "t"}, ""},
		{"no run id", `{"exit_code":3,"error":"boom"}`, RunResult{RunID: id, ExitCode: 3, Error: "boom"}, ""},
		{"older worker", `{"agent_session_id":"old"}`, RunResult{RunID: id, TaskSessionID: "old"}, ""},
		{"another run", `{"run_id":"run_ffffffffffffffff","exit_code":0}`, RunResult{}, `names run "run_ffffffffffffffff"`},
		{"not json", `{"run_id":`, RunResult{}, "unexpected end of JSON"},
		{"too big", `{"error":"` + strings.Repeat("x", maxMetaBytes) + `"}`, RunResult{}, "over 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "meta.json")
			if err := os.WriteFile(p, []byte(tc.meta), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := readResult(p, id)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v %v, want %+v", got, err, tc.want)
			}
		})
	}
}
