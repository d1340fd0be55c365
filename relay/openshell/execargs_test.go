package openshell_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
)

// TestExecCharacterRules runs upstream's character rules through ferry's
// client against the embedded gateway, in plaintext and over mTLS: what
// upstream accepts reaches the sandbox and runs, what it refuses is
// refused by the client before any request is sent.
func TestExecCharacterRules(t *testing.T) {
	for _, mode := range []struct {
		name  string
		plain bool
	}{{"Plaintext", true}, {"MTLS", false}} {
		t.Run(mode.name, func(t *testing.T) {
			g := gatewaytest.Start(t, gatewaytest.Options{Plaintext: mode.plain})
			c := g.Client(t, openshell.Config{})
			g.Sandbox(t, c, "box")
			for _, tc := range []struct {
				name   string
				cmd    relay.Command
				stdout string // when accepted
				msg    string // non-empty: refused with relay.ErrInvalid and this
			}{
				{"MultiLineScript", relay.Command{Argv: []string{"sh", "-c", "echo one\necho two"}}, "one\ntwo\n", ""},
				{"PyfuncKey", relay.Command{Argv: []string{"sh", "-c", `printf %s "$OPENSHELL_PYFUNC_B64"`}, Env: map[string]string{"OPENSHELL_PYFUNC_B64": "ZGF0YQ=="}}, "ZGF0YQ==", ""},
				{"NULInArg", relay.Command{Argv: []string{"echo", "ferry-nul\x00"}}, "", "contains NUL"},
				{"OtherOpenShellKey", relay.Command{Argv: []string{"echo", "ferry-reserved"}, Env: map[string]string{"OPENSHELL_SANDBOX": "x"}}, "", "OPENSHELL_ keys are reserved"},
				{"LFInEnvValue", relay.Command{Argv: []string{"echo", "ferry-envlf"}, Env: map[string]string{"V": "a\nb"}}, "", "newline"},
				{"CRInEnvValue", relay.Command{Argv: []string{"echo", "ferry-envcr"}, Env: map[string]string{"V": "a\rb"}}, "", "carriage return"},
				{"NULInEnvValue", relay.Command{Argv: []string{"echo", "ferry-envnul"}, Env: map[string]string{"V": "a\x00b"}}, "", "contains NUL"},
				{"LFInWorkdir", relay.Command{Argv: []string{"echo", "ferry-wdlf"}, Workdir: "a\nb"}, "", "workdir"},
				{"CRInWorkdir", relay.Command{Argv: []string{"echo", "ferry-wdcr"}, Workdir: "a\rb"}, "", "workdir"},
				{"NULInWorkdir", relay.Command{Argv: []string{"echo", "ferry-wdnul"}, Workdir: "a\x00b"}, "", "workdir"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					var out bytes.Buffer
					cmd := tc.cmd
					cmd.Sandbox, cmd.Stdout = "box", &out
					code, err := c.Exec(ctxFor(t), &cmd)
					if tc.msg == "" {
						if err != nil || code != 0 || out.String() != tc.stdout {
							t.Fatalf("code=%d err=%v stdout=%q, want 0 and %q", code, err, out.String(), tc.stdout)
						}
						return
					}
					if !errors.Is(err, relay.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
						t.Fatalf("err=%v, want relay.ErrInvalid with %q", err, tc.msg)
					}
					if strings.Contains(g.Seen.String(), cmd.Argv[1]) {
						t.Fatalf("a request the client refused reached the gateway:\n%s", g.Seen)
					}
				})
			}
		})
	}
}
