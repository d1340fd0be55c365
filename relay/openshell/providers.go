package openshell

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datamodelv1 "github.com/ferry-dev/ferry/proto/openshell/datamodel/v1"
	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
)

// ProviderSpec is what a provider is created from: upstream's Provider as
// `openshell provider create` fills it.
type ProviderSpec struct {
	// Name is the provider's name, which sandboxes attach
	// (Spec.Providers); "" lets the gateway choose one.
	Name string
	// Type is the provider type's slug ("github", "claude-code",
	// "anthropic", ...): what the gateway injects depends on it.
	Type string
	// Credentials are the secret values, keyed by the variable the
	// gateway injects into a sandbox that attaches the provider. The
	// gateway needs at least one. They travel to the gateway only, and
	// never come back: Provider shows their keys.
	Credentials map[string]string
	// Config is the provider's non-secret configuration.
	Config map[string]string
}

// Provider is a provider as the gateway shows it. Upstream's gateway
// answers every credential value with "REDACTED", so only the keys are
// kept.
type Provider struct {
	Name      string
	ID        string
	Workspace string
	Type      string
	// CredentialKeys are the names of its credentials, sorted.
	CredentialKeys []string
	Config         map[string]string
	Created        time.Time // zero if the gateway did not say
}

// ErrProviderNotFound means no provider of that name exists in the
// client's workspace: a sandbox that attaches one is refused (upstream's
// FAILED_PRECONDITION "provider 'NAME' not found").
var ErrProviderNotFound = errors.New("openshell: provider not found")

// ErrProviderExists means a provider of that name exists already.
var ErrProviderExists = errors.New("openshell: provider already exists")

// ErrProviderInUse means a sandbox still attaches the provider, so the
// gateway will not delete it.
var ErrProviderInUse = errors.New("openshell: provider in use")

// CreateProvider creates a provider in the client's workspace. The
// request carries the workspace as its profile workspace, as upstream's
// CLI sends it.
func (c *Client) CreateProvider(ctx context.Context, spec ProviderSpec) (Provider, error) {
	resp, err := c.api.CreateProvider(ctx, &openshellv1.CreateProviderRequest{
		Workspace: c.cfg.Workspace,
		Provider: &datamodelv1.Provider{
			Metadata:         &datamodelv1.ObjectMeta{Name: spec.Name, Workspace: c.cfg.Workspace},
			Type:             spec.Type,
			Credentials:      spec.Credentials,
			Config:           spec.Config,
			ProfileWorkspace: c.cfg.Workspace,
		},
	})
	if err != nil {
		return Provider{}, c.providerError("create provider "+spec.Name, err)
	}
	return describeProvider(resp.GetProvider()), nil
}

// Provider returns the provider called name. One that does not exist is
// an error wrapping ErrProviderNotFound.
func (c *Client) Provider(ctx context.Context, name string) (Provider, error) {
	resp, err := c.api.GetProvider(ctx, &openshellv1.GetProviderRequest{Name: name, Workspace: c.cfg.Workspace})
	if err != nil {
		return Provider{}, c.providerError("get provider "+name, err)
	}
	return describeProvider(resp.GetProvider()), nil
}

// Providers returns the providers of the client's workspace.
func (c *Client) Providers(ctx context.Context) ([]Provider, error) {
	return listAll(ctx, "providers", func(ctx context.Context, off uint32) ([]*datamodelv1.Provider, error) {
		resp, err := c.api.ListProviders(ctx, &openshellv1.ListProvidersRequest{Limit: listPage, Offset: off, Workspace: c.cfg.Workspace})
		if err != nil {
			return nil, c.providerError("list providers", err)
		}
		return resp.GetProviders(), nil
	}, describeProvider)
}

// DeleteProvider deletes the provider called name. One that does not
// exist is an error wrapping ErrProviderNotFound (upstream answers
// deleted=false); one a sandbox attaches, ErrProviderInUse.
func (c *Client) DeleteProvider(ctx context.Context, name string) error {
	resp, err := c.api.DeleteProvider(ctx, &openshellv1.DeleteProviderRequest{Name: name, Workspace: c.cfg.Workspace})
	if err != nil {
		return c.providerError("delete provider "+name, err)
	}
	if !resp.GetDeleted() {
		return fmt.Errorf("delete provider %s: %w", name, ErrProviderNotFound)
	}
	return nil
}

// providerError is lifecycleError with the provider calls' own
// sentinels. Upstream's messages are the only way to tell its
// FAILED_PRECONDITIONs apart.
func (c *Client) providerError(action string, err error) error {
	msg := status.Convert(err).Message()
	switch code := status.Code(err); {
	case code == codes.NotFound && msg == "provider not found":
		return fmt.Errorf("%s: %w", action, ErrProviderNotFound)
	case code == codes.AlreadyExists:
		return fmt.Errorf("%s: %w", action, ErrProviderExists)
	case code == codes.FailedPrecondition && strings.Contains(msg, "is attached to sandbox"):
		return fmt.Errorf("%s: %w: %s", action, ErrProviderInUse, msg)
	}
	return c.lifecycleError(action, err)
}

// missingProvider is the provider a CreateSandbox refusal names as
// unknown, from upstream's "provider 'NAME' not found".
func missingProvider(err error) (string, bool) {
	if status.Code(err) != codes.FailedPrecondition {
		return "", false
	}
	msg := status.Convert(err).Message()
	name, ok := strings.CutPrefix(msg, "provider '")
	if !ok {
		return "", false
	}
	name, ok = strings.CutSuffix(name, "' not found")
	return name, ok
}

func describeProvider(p *datamodelv1.Provider) Provider {
	if p == nil {
		return Provider{}
	}
	out := Provider{
		Name:      p.GetMetadata().GetName(),
		ID:        p.GetMetadata().GetId(),
		Workspace: p.GetMetadata().GetWorkspace(),
		Type:      p.GetType(),
		Config:    p.GetConfig(),
	}
	for k := range p.GetCredentials() {
		out.CredentialKeys = append(out.CredentialKeys, k)
	}
	slices.Sort(out.CredentialKeys)
	if ms := p.GetMetadata().GetCreatedAtMs(); ms > 0 {
		out.Created = time.UnixMilli(ms)
	}
	return out
}
