package rascal

import (
	"context"
	"encoding/json"
	"errors"
	"net"
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

// TestReportResult is Rascal's request and answer over a Unix socket: the
// result as sent, an answer that refuses it as errRejected with its
// reason, and an answer that is not Rascal's as an error.
func TestReportResult(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		err          error
		reason       string
	}{
		{"ok", `{"ok":true}`, nil, ""},
		{"rejected", `{"ok":false,"error":"run execution not found"}`, errRejected, "run execution not found"},
		{"garbage", `not json`, nil, "decode run result response"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "rr")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			sock := filepath.Join(dir, "s")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan RunResult, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				var r RunResult
				json.NewDecoder(c).Decode(&r)
				got <- r
				c.Write([]byte(tc.answer + "\n"))
			}()
			t.Cleanup(func() { ln.Close() })
			want := RunResult{RunID: "run_0123456789abcdef", ExitCode: 3, Error: "boom"}
			err = reportResult(context.Background(), sock, want)
			switch {
			case tc.err != nil && !errors.Is(err, tc.err), tc.reason != "" && (err == nil || !strings.Contains(err.Error(), tc.reason)), tc.reason == "" && err != nil:
				t.Fatalf("err %v; want %v %q", err, tc.err, tc.reason)
			}
			if r := <-got; r != want {
				t.Fatalf("the socket got %+v, want %+v", r, want)
			}
		})
	}
}
