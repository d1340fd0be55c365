package openshell

import (
	"context"
	"errors"
	"fmt"
)

// Ensure makes sure that a sandbox called name exists and is READY:
// it creates it from image (the gateway's default when empty) and waits,
// or, when one of that name exists already (a retried start, a second
// orchestrator), waits for that one. It is idempotent; an existing sandbox
// is taken whatever image it was made from. A sandbox being deleted, or
// failed, is an error wrapping relay.ErrNotReady.
func (c *Client) Ensure(ctx context.Context, name, image string) error {
	_, err := c.Create(ctx, Spec{Name: name, Image: image})
	if !errors.Is(err, ErrExists) {
		return err
	}
	sb, err := c.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("ensure sandbox %s: %w", name, err)
	}
	if _, err := c.WaitReady(ctx, sb); err != nil {
		return fmt.Errorf("ensure sandbox %s: %w", name, err)
	}
	return nil
}
