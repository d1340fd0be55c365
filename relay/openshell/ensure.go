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
// failed, is an error wrapping relay.ErrNotReady. A sandbox of that name
// whose labels named by spec.Match differ from spec's is a *ForeignError,
// before any wait. spec.Name is required: without it every call would
// make a new sandbox.
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
	if err := spec.matches(sb.GetMetadata().GetLabels()); err != nil {
		return Info{}, err
	}
	info, err := c.waitReady(ctx, sb)
	if err != nil {
		return Info{}, fmt.Errorf("ensure sandbox %s: %w", spec.Name, err)
	}
	return info, nil
}

// ForeignError means Ensure found a sandbox of the name it was asked for
// that was made for something else: its label Key is Got, not Want (""
// when it has none). It is never reused: deleting it is its owner's call.
type ForeignError struct {
	Sandbox        string
	Key, Want, Got string
}

func (e *ForeignError) Error() string {
	got := fmt.Sprintf("%q", e.Got)
	if e.Got == "" {
		got = "no such label"
	}
	return fmt.Sprintf("sandbox %s exists but was not made for this: its label %s is %s, want %q", e.Sandbox, e.Key, got, e.Want)
}

// Unwrap makes a ForeignError an ErrExists.
func (e *ForeignError) Unwrap() error { return ErrExists }

// matches checks the labels of a sandbox called s.Name against s.Match.
func (s Spec) matches(labels map[string]string) error {
	for _, k := range s.Match {
		if got, ok := labels[k]; !ok || got != s.Labels[k] {
			return &ForeignError{Sandbox: s.Name, Key: k, Want: s.Labels[k], Got: got}
		}
	}
	return nil
}
