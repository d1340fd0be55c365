package ferry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/follow"
)

// Followed are the artifacts that grow during a run and are followed live,
// the first being the one whose lines are shown.
var Followed = []string{"agent.ndjson", "runner.log"}

// FollowSpec is a live follow of a run's growing artifacts.
type FollowSpec struct {
	// MetaDir is the sandbox directory the artifacts are in; default
	// DefaultMetaDir.
	MetaDir string
	// Out is the local directory the copies grow in; a restarted follow
	// continues where the local files end.
	Out string
	// Lines receives each new line of agent.ndjson once, in order; nil
	// shows nothing.
	Lines io.Writer
	// StopWhen, when set, ends the follow once this path (relative to
	// MetaDir) exists and everything before it has arrived.
	StopWhen string
}

// Follow keeps the local agent.ndjson and runner.log growing as the ones in
// the sandbox grow, through the agent, until ctx ends or StopWhen appears.
// A lost relay is redialled and the follow resumes at the last byte
// written: nothing is lost or doubled. However it ends, what arrived is
// written. The end of ctx is a clean end: Follow returns nil.
func Follow(ctx context.Context, sb Sandbox, spec FollowSpec) error {
	if sb.Mode == transfer.ModePOSIX {
		return fmt.Errorf("follow %s: %w (not --mode posix)", sb.Name, transfer.ErrAgentRequired)
	}
	if spec.MetaDir == "" {
		spec.MetaDir = DefaultMetaDir
	}
	log := sb.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f, err := follow.New(follow.Config{
		Dial: func(ctx context.Context) (*agent.Client, error) {
			c, _, err := agent.Dial(ctx, agent.DialConfig{X: sb.X, Sandbox: sb.Name, Bundle: sb.Agents, Memory: sb.AgentMemory, Logger: log})
			if errors.Is(err, agent.ErrUnavailable) {
				return nil, fmt.Errorf("follow %s: %w: %w", sb.Name, transfer.ErrAgentRequired, err)
			}
			return c, err
		},
		RemoteDir: spec.MetaDir,
		OutDir:    spec.Out,
		Files:     Followed,
		Lines:     spec.Lines,
		StopWhen:  spec.StopWhen,
		Logger:    log,
	})
	if err != nil {
		return err
	}
	err = f.Run(ctx)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}
