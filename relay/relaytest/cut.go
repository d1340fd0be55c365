package relaytest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/ferry-dev/ferry/relay"
)

// CutOutput is a Harness.Cut for an implementation that has no relay to
// cut (relay/local): the output writers fail once n bytes have passed, as
// a dropped relay would stop them, and that failure is reported as
// relay.ErrRelayLost. What it exercises is the implementation's handling
// of a writer that fails mid-stream: stop the process, never report
// success.
func CutOutput(x relay.Execer, n int64) relay.Execer { return cutExecer{x: x, n: n} }

var errCutOutput = errors.New("relaytest: output cut")

type cutExecer struct {
	x relay.Execer
	n int64
}

func (c cutExecer) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	budget := &cutBudget{left: c.n}
	cc := *cmd
	cc.Stdout = &cutWriter{b: budget, w: cmd.Stdout}
	cc.Stderr = &cutWriter{b: budget, w: cmd.Stderr}
	code, err := c.x.Exec(ctx, &cc)
	if errors.Is(err, errCutOutput) {
		return code, fmt.Errorf("%w: %w", relay.ErrRelayLost, err)
	}
	return code, err
}

type cutBudget struct {
	mu   sync.Mutex
	left int64
}

type cutWriter struct {
	b *cutBudget
	w io.Writer
}

func (cw *cutWriter) Write(p []byte) (int, error) {
	cw.b.mu.Lock()
	n := min(int64(len(p)), cw.b.left)
	cw.b.left -= n
	cw.b.mu.Unlock()
	if n > 0 && cw.w != nil {
		if _, err := cw.w.Write(p[:n]); err != nil {
			return 0, err
		}
	}
	if n < int64(len(p)) {
		return int(n), errCutOutput
	}
	return len(p), nil
}
