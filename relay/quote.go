package relay

import (
	"sort"
	"strings"
)

// Quote returns s as one POSIX shell word. Every byte other than a single
// quote is literal inside single quotes, so only that one needs escaping.
func Quote(s string) string {
	if s != "" && strings.IndexFunc(s, needsQuote) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

// needsQuote uses the OpenShell gateway's safe set, so that a command
// string ferry builds is the one the gateway would build. "=" is outside
// it: an unquoted first word "A=b" would be an assignment.
func needsQuote(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune("-_./", r)
}

// ShellCommand assembles the string an OpenShell gateway hands to
// `bash -lc`: `cd <workdir> && K=v ... argv...`, each part quoted. An empty
// workdir leaves the shell where it started (the workspace root).
func ShellCommand(workdir string, env map[string]string, argv []string) string {
	var b strings.Builder
	if workdir != "" {
		b.WriteString("cd ")
		b.WriteString(Quote(workdir))
		b.WriteString(" && ")
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(Quote(env[k]))
		b.WriteByte(' ')
	}
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(Quote(a))
	}
	return b.String()
}
