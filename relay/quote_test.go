package relay

import (
	"os/exec"
	"strings"
	"testing"
)

// unquote is a reader for the one POSIX shell form Quote produces: plain
// safe characters, and single-quoted runs joined by "\"'\"". It fails on
// anything else, so a Quote that emits other syntax fails the fuzz test.
func unquote(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); {
		switch s[i] {
		case '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return "", false
			}
			b.WriteString(s[i+1 : i+1+j])
			i += j + 2
		case '"':
			if !strings.HasPrefix(s[i:], `"'"`) {
				return "", false
			}
			b.WriteByte('\'')
			i += 3
		default:
			if needsQuote(rune(s[i])) || s[i] >= 0x80 {
				return "", false
			}
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), true
}

func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", "a", "a b", "'", "''", `"'"`, "$(id)", "`x`", "A=b", "-n", "ünï", `\`, "*?[]", "\t", "x'y'z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := Quote(s)
		got, ok := unquote(q)
		if !ok || got != s {
			t.Fatalf("Quote(%q) = %q, reads back as %q (ok=%v)", s, q, got, ok)
		}
		if s == "" && q != "''" {
			t.Fatalf("Quote(\"\") = %q, want ''", q)
		}
	})
}

// TestQuoteShell checks Quote and ShellCommand against a real bash: every
// argument arrives as itself, as one word, and assignments stay
// assignments.
func TestQuoteShell(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	args := []string{"", " ", "a b", "'", `"`, `\`, "$(echo pwned)", "`echo pwned`", "*", "~", "A=b", "-e", "ünï ✓", "\t", "${HOME}", "!", "#", "&", ";", "|", ">x", "x'\"y"}
	script := ShellCommand("", map[string]string{"FERRY_Q": "it's $(x)"}, append([]string{"printf", `[%s]\n`, "$FERRY_Q"}, args...))
	out, err := exec.Command(bash, "-c", `eval "$1"; printf '%s' "$FERRY_Q"`, "bash", script).CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	var want strings.Builder
	want.WriteString("[$FERRY_Q]\n")
	for _, a := range args {
		want.WriteString("[" + a + "]\n")
	}
	if string(out) != want.String() {
		t.Fatalf("got\n%q\nwant\n%q", out, want.String())
	}
	out, err = exec.Command(bash, "-c", ShellCommand("", map[string]string{"FERRY_Q": "it's $(x)"}, []string{"sh", "-c", `printf %s "$FERRY_Q"`})).CombinedOutput()
	if err != nil || string(out) != "it's $(x)" {
		t.Fatalf("env assignment: %v %q", err, out)
	}
}
