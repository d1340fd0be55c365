package relay_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/relay"
)

// TestValidateUpstreamRules holds the cases of upstream's
// validate_exec_request_fields tests (OpenShell v0.0.111,
// crates/openshell-server/src/grpc/validation.rs): an argument may hold a
// newline, never a NUL; an environment value and the workdir may hold
// neither, nor a carriage return; OPENSHELL_PYFUNC_B64 is the one
// OPENSHELL_ key an exec may set.
func TestValidateUpstreamRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  relay.Command
		msg  string // empty: valid
	}{
		{"MultiLineScript", relay.Command{Argv: []string{"sh", "-c", "echo one\necho two"}}, ""},
		{"CRLFInArg", relay.Command{Argv: []string{"sh", "-c", "echo one\r\necho two"}}, ""},
		{"NULInArg", relay.Command{Argv: []string{"echo", "a\x00b"}}, `argument 1 "a\x00b" contains NUL`},
		{"PyfuncKey", relay.Command{Argv: []string{"python", "-c", "pass"}, Env: map[string]string{"OPENSHELL_PYFUNC_B64": "ZGF0YQ=="}}, ""},
		{"OtherOpenShellKey", relay.Command{Argv: []string{"true"}, Env: map[string]string{"OPENSHELL_SANDBOX_ID": "x"}}, "OPENSHELL_SANDBOX_ID: OPENSHELL_ keys are reserved"},
		{"PyfuncKeyLowercase", relay.Command{Argv: []string{"true"}, Env: map[string]string{"openshell_pyfunc_b64": "x"}}, ""},
		{"PyfuncKeyPrefixed", relay.Command{Argv: []string{"true"}, Env: map[string]string{"OPENSHELL_PYFUNC_B64X": "x"}}, "OPENSHELL_ keys are reserved"},
		{"PyfuncValueTooLong", relay.Command{Argv: []string{"true"}, Env: map[string]string{"OPENSHELL_PYFUNC_B64": strings.Repeat("A", relay.MaxEnvValueLen+1)}}, "is 32769 bytes, at most 32768"},
		{"PyfuncValueNewline", relay.Command{Argv: []string{"true"}, Env: map[string]string{"OPENSHELL_PYFUNC_B64": "a\nb"}}, "contains NUL, newline or carriage return"},
		{"EnvValueLF", relay.Command{Argv: []string{"true"}, Env: map[string]string{"V": "a\nb"}}, "environment value of V contains NUL, newline or carriage return"},
		{"EnvValueCR", relay.Command{Argv: []string{"true"}, Env: map[string]string{"V": "a\rb"}}, "environment value of V contains NUL, newline or carriage return"},
		{"EnvValueNUL", relay.Command{Argv: []string{"true"}, Env: map[string]string{"V": "a\x00b"}}, "environment value of V contains NUL, newline or carriage return"},
		{"WorkdirLF", relay.Command{Argv: []string{"true"}, Workdir: "/tmp\nx"}, "contains NUL, newline or carriage return"},
		{"WorkdirCR", relay.Command{Argv: []string{"true"}, Workdir: "/tmp\rx"}, "contains NUL, newline or carriage return"},
		{"WorkdirNUL", relay.Command{Argv: []string{"true"}, Workdir: "/tmp\x00x"}, "contains NUL, newline or carriage return"},
		{"ArgAtLimit", relay.Command{Argv: []string{"echo", strings.Repeat("a", relay.MaxArgLen)}}, ""},
		{"ArgOverLimit", relay.Command{Argv: []string{"echo", strings.Repeat("a", relay.MaxArgLen+1)}}, "argument 1 is 32769 bytes, at most 32768"},
		{"WorkdirOverLimit", relay.Command{Argv: []string{"true"}, Workdir: strings.Repeat("d", relay.MaxWorkdirLen+1)}, "workdir is 4097 bytes, at most 4096"},
		{"1025Args", relay.Command{Argv: make([]string, relay.MaxArgs+1)}, "1025 arguments, at most 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cmd.Validate()
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("refused a command upstream accepts: %v", err)
				}
				return
			}
			if !errors.Is(err, relay.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err=%v, want relay.ErrInvalid with %q", err, tc.msg)
			}
		})
	}
}
