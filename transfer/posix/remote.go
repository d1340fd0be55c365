package posix

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// Remote is one sandbox reached through an exec channel. Paths without a
// leading "/" are relative to the sandbox's workspace root, where exec
// starts. A Remote is a value; it is safe for concurrent use when X is.
type Remote struct {
	X       relay.Execer
	Sandbox string
}

// Kind is what a path in the sandbox is; see archive.Kind.
type Kind = archive.Kind

const (
	Missing = archive.Missing
	Dir     = archive.Dir
	File    = archive.File
	Symlink = archive.Symlink
	Other   = archive.Other
)

var kinds = map[string]Kind{"missing": Missing, "dir": Dir, "file": File, "symlink": Symlink, "other": Other}

//go:embed scripts/*.sh
var scriptFS embed.FS

var (
	statScript     = script("stat.sh")
	uploadScript   = script("upload.sh")
	downloadScript = script("download.sh")
	cleanupScript  = script("cleanup.sh")
)

// script returns an embedded script as one line: an argv word may not
// hold a newline, and gateways log argv. Comment lines and indentation go;
// lines are joined with spaces, so each must end in ";" or in a word after
// which the command continues. A script that breaks the rule is a bug, and
// panics at init.
func script(name string) string {
	b, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic(err)
	}
	return checkLines(name, string(b))
}

func checkLines(name, text string) string {
	var out []string
	for i, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		last := f[len(f)-1]
		if !strings.HasSuffix(last, ";") && !continues[last] {
			panic(fmt.Sprintf("posix: %s:%d does not end in a terminator: %s", name, i+1, l))
		}
		out = append(out, l)
	}
	return strings.Join(out, " ")
}

// continues lists the words after which a shell command goes on.
var continues = map[string]bool{"then": true, "do": true, "else": true, "{": true, "(": true, "|": true, "&&": true, "||": true, "in": true}

// Stat reports what is at path in the sandbox without following a final
// symlink (a symlink is Symlink, dangling or not). One exec.
func (r Remote) Stat(ctx context.Context, p string) (Kind, error) {
	return r.stat(ctx, p, false)
}

// StatFollow is Stat following a final symlink, as cp does for a
// destination: a link to a directory is Dir; a dangling link is Symlink.
func (r Remote) StatFollow(ctx context.Context, p string) (Kind, error) {
	return r.stat(ctx, p, true)
}

func (r Remote) stat(ctx context.Context, p string, follow bool) (Kind, error) {
	rp, err := remotePath("stat", p)
	if err != nil {
		return Missing, err
	}
	f := "0"
	if follow {
		f = "1"
	}
	tag := newTag()
	ctl := newControl(tag)
	code, err := r.run(ctx, statScript, []string{tag, f, rp}, nil, nil, ctl)
	if err != nil {
		return Missing, fmt.Errorf("stat %s: %w", p, err)
	}
	v, ok := ctl.msg("kind")
	k, known := kinds[v]
	if code != 0 || !ok || !known {
		return Missing, fmt.Errorf("stat %s: %w", p, &ExitError{Op: "sh", Code: code, Stderr: ctl.stderr()})
	}
	return k, nil
}

// run execs `sh -c script sh args...` in the sandbox. stderr goes to ctl.
func (r Remote) run(ctx context.Context, script string, args []string, stdin io.Reader, stdout io.Writer, ctl *control) (int, error) {
	if r.X == nil {
		return 0, errors.New("posix: Remote has no Execer")
	}
	argv := append([]string{"sh", "-c", script, "sh"}, args...)
	code, err := r.X.Exec(ctx, &relay.Command{
		Sandbox: r.Sandbox,
		Argv:    argv,
		Stdin:   stdin,
		Stdout:  stdout,
		Stderr:  ctl,
	})
	ctl.done()
	return code, err
}

// checkPath refuses what can never be passed as one argument line.
func checkPath(op, p string) error {
	if p == "" {
		return &fs.PathError{Op: op, Path: p, Err: fmt.Errorf("%w: empty", ErrInvalidPath)}
	}
	if strings.ContainsAny(p, "\x00\n\r") {
		return &fs.PathError{Op: op, Path: p, Err: fmt.Errorf("%w: contains NUL, newline or carriage return", ErrInvalidPath)}
	}
	return nil
}

// remotePath checks p and returns it cleaned, with "./" before a relative
// path so that no command can take it for an option.
func remotePath(op, p string) (string, error) {
	if err := checkPath(op, p); err != nil {
		return "", err
	}
	c := path.Clean(p)
	if c == "." || path.IsAbs(c) {
		return c, nil
	}
	return "./" + c, nil
}

// memberName checks a Download name: relative and inside its directory.
func memberName(op, n string) (string, error) {
	if err := checkPath(op, n); err != nil {
		return "", err
	}
	c := path.Clean(n)
	if path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", &fs.PathError{Op: op, Path: n, Err: fmt.Errorf("%w: not a relative path inside the directory", ErrInvalidPath)}
	}
	return c, nil
}
