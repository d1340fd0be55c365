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
