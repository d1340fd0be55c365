package openshell

import (
	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"google.golang.org/grpc/credentials"
)

// API is c's generated client, for tests that send a request this
// package never builds.
func API(c *Client) openshellv1.OpenShellClient { return c.api }

// CreateRequest is the CreateSandboxRequest c's Create sends for s.
func CreateRequest(c *Client, s Spec) *openshellv1.CreateSandboxRequest {
	return s.request(c.cfg.Workspace)
}

// MissingProvider is the provider a CreateSandbox refusal names.
var MissingProvider = missingProvider

// IDKey is name's key in c's IDCache.
func IDKey(c *Client, name string) string { return c.idKey(name) }

// EarlyCreds is c as Dial wraps it: a connection's first call leaves
// without waiting for the server's SETTINGS.
func EarlyCreds(c credentials.TransportCredentials) credentials.TransportCredentials {
	return earlyCreds{c}
}

// StdinStats is what c's Execs read of their stdin: before their
// headers, again for a second attempt, and by a superseded attempt for
// the one that followed it.
type StdinStats struct{ Early, Replayed, Inherited int64 }

func Stdin(c *Client) StdinStats {
	return StdinStats{c.stdinStats[0].Load(), c.stdinStats[1].Load(), c.stdinStats[2].Load()}
}

// OneShot reports whether c has fallen back to one-shot ExecSandbox.
func OneShot(c *Client) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.oneShot
}
