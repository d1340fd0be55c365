package openshell

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferry-dev/ferry/relay"
)

// Ensure makes sure that the sandbox spec names exists and is READY: it
// looks it up first, creates it from spec when there is none, and waits.
// A sandbox of that name that exists already (a retried start, a second
// orchestrator that won the race to create it) is waited for, whatever it
// was made from: Ensure creates at most once. A sandbox being deleted, or
// failed, is an error wrapping relay.ErrNotReady. spec.Name is required:
// without it every call would make a new sandbox.
func (c *Client) Ensure(ctx context.Context, spec Spec) (Info, error) {
	if spec.Name == "" {
		return Info{}, fmt.Errorf("ensure sandbox: %w: no name", ErrInvalidRequest)
	}
	sb, err := c.get(ctx, spec.Name)
	if errors.Is(err, relay.ErrNotFound) {
		var info Info
		info, err = c.Create(ctx, spec)
		if !errors.Is(err, ErrExists) {
			return info, err
		}
		sb, err = c.get(ctx, spec.Name)
	}
	if err != nil {
		return Info{}, fmt.Errorf("ensure sandbox %s: %w", spec.Name, err)
	}
	info, err := c.waitReady(ctx, sb)
	if err != nil {
		return Info{}, fmt.Errorf("ensure sandbox %s: %w", spec.Name, err)
	}
	return info, nil
}
