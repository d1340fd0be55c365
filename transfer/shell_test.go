package transfer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay/local"
	"github.com/ferry-dev/ferry/transfer"
)

// TestShell: arguments reach the script as words, never spliced into it,
// and a failed script is the *ExitError every mode reports, with its code
// and stderr.
func TestShell(t *testing.T) {
	x, err := local.New(local.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tgt := transfer.Target{X: x, Name: "box"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := transfer.Shell(ctx, tgt, `printf '%s|' "$@"`, "a b", "$(echo no)", "'")
	if err != nil || out != "a b|$(echo no)|'|" {
		t.Fatalf("Shell = %q, %v", out, err)
	}
	_, err = transfer.Shell(ctx, tgt, `echo refused >&2; exit 3`)
	var ee *transfer.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || ee.Stderr != "refused" || ee.Op != "sh" {
		t.Fatalf("err = %v, want an *ExitError of sh, 3, refused", err)
	}
}
