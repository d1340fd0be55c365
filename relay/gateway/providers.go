package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/renameio/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	datamodelv1 "github.com/ferry-dev/ferry/proto/openshell/datamodel/v1"
	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
)

// Providers are upstream's (openshell-server grpc/provider.rs and
// grpc/validation.rs at v0.0.111): named credentials and configuration in
// a workspace, which a sandbox attaches by name. Their checks, codes and
// messages are upstream's, in its order. What this gateway leaves out:
//   - it stores credentials and injects none of them into a sandbox;
//   - there are no provider profiles, so every type needs at least one
//     credential (upstream lets a type whose profile resolves its
//     credentials at runtime have none), and a provider's environment is
//     its credentials' keys only (no profile-generated configuration);
//   - no credential storage driver (credential_handles stay empty) and no
//     credential refresh.
//
// On disk a provider is root/.gateway/providers/<id>.pb, binary proto,
// 0600 in a 0700 directory, replaced atomically. It holds the credentials
// in clear, as upstream's store does without a credential driver: the
// gateway's root is as secret as they are.

// Upstream's MAX_NAME_LEN, MAX_PROVIDER_TYPE_LEN,
// MAX_PROVIDER_CREDENTIALS_ENTRIES and MAX_PROVIDER_CONFIG_ENTRIES.
const (
	maxProviderNameLen     = 253
	maxProviderTypeLen     = 64
	maxProviderCredentials = 32
	maxProviderConfig      = 64
)

// redacted is what Get, List, Create and Update answer in place of each
// credential value: upstream's redact_provider_credentials keeps only the
// keys, so that a caller can list them.
const redacted = "REDACTED"

func (r *registry) providerDir() string { return filepath.Join(r.metaDir(), "providers") }

func (r *registry) providerPath(p *datamodelv1.Provider) string {
	return filepath.Join(r.providerDir(), p.GetMetadata().GetId()+recordExt)
}

// loadProviders reads the provider records. Callers own r still.
func (r *registry) loadProviders() error {
	if err := os.MkdirAll(r.providerDir(), 0o700); err != nil {
		return fmt.Errorf("create provider dir: %w", err)
	}
	ents, err := os.ReadDir(r.providerDir())
	if err != nil {
		return fmt.Errorf("read provider dir: %w", err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), recordExt) || !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(r.providerDir(), e.Name()))
		if err != nil {
			return fmt.Errorf("read provider record %s: %w", e.Name(), err)
		}
		p := &datamodelv1.Provider{}
		if err := proto.Unmarshal(b, p); err != nil {
			return fmt.Errorf("parse provider record %s: %w", e.Name(), err)
		}
		r.prov[key(p.GetMetadata().GetWorkspace(), p.GetMetadata().GetName())] = p
	}
	return nil
}

func (r *registry) saveProvider(p *datamodelv1.Provider) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode provider record: %w", err)
	}
	if err := renameio.WriteFile(r.providerPath(p), b, 0o600, renameio.WithStaticPermissions(0o600)); err != nil {
		return fmt.Errorf("write provider record: %w", err)
	}
	return nil
}

// redact is p as the gateway answers it: upstream's
// redact_provider_credentials.
func redact(p *datamodelv1.Provider) *datamodelv1.Provider {
	out := proto.Clone(p).(*datamodelv1.Provider)
	for k := range out.Credentials {
		out.Credentials[k] = redacted
	}
	for k := range out.CredentialHandles {
		if out.Credentials == nil {
			out.Credentials = map[string]string{}
		}
		out.Credentials[k] = redacted
	}
	out.CredentialHandles = nil
	return out
}

// validProviderMeta is upstream's validate_object_metadata for a provider.
func validProviderMeta(m *datamodelv1.ObjectMeta) error {
	switch {
	case m == nil:
		return errors.New("provider metadata is required")
	case m.GetId() == "":
		return errors.New("provider metadata.id cannot be empty")
	case m.GetName() == "":
		return errors.New("provider metadata.name cannot be empty")
	}
	if err := validLabels(m.GetLabels()); err != nil {
		return err
	}
	if err := validStringMap(m.GetAnnotations(), maxAnnotations, "provider.metadata.annotations"); err != nil {
		return err
	}
	for k := range m.GetAnnotations() {
		if err := validLabelKey(k); err != nil {
			return err
		}
	}
	return nil
}

// validProviderFields is upstream's validate_provider_fields: the name
// and type, then the fields an update may change.
func validProviderFields(p *datamodelv1.Provider) error {
	if n := len(p.GetMetadata().GetName()); n > maxProviderNameLen {
		return fmt.Errorf("provider.name exceeds maximum length (%d > %d)", n, maxProviderNameLen)
	}
	if n := len(p.GetType()); n > maxProviderTypeLen {
		return fmt.Errorf("provider.type exceeds maximum length (%d > %d)", n, maxProviderTypeLen)
	}
	return validProviderMutable(p)
}

// validProviderMutable is upstream's validate_provider_mutable_fields,
// for a provider with no credential handles (this gateway makes none).
func validProviderMutable(p *datamodelv1.Provider) error {
	if err := validStringMap(p.GetCredentials(), maxProviderCredentials, "provider.credentials"); err != nil {
		return err
	}
	if err := validStringMap(p.GetConfig(), maxProviderConfig, "provider.config"); err != nil {
		return err
	}
	exp := p.GetCredentialExpiresAtMs()
	if len(exp) > maxProviderCredentials {
		return fmt.Errorf("provider.credential_expires_at_ms exceeds maximum entries (%d > %d)", len(exp), maxProviderCredentials)
	}
	for k, v := range exp {
		if len(k) > maxMapKeyLen {
			return fmt.Errorf("provider.credential_expires_at_ms key exceeds maximum length (%d > %d)", len(k), maxMapKeyLen)
		}
		if v < 0 {
			return errors.New("provider.credential_expires_at_ms value must be greater than or equal to 0")
		}
	}
	return nil
}

func invalid(err error) error { return status.Error(codes.InvalidArgument, err.Error()) }

// errProviderHandles is upstream's refusal of client-supplied handles.
var errProviderHandles = status.Error(codes.InvalidArgument, "provider.credential_handles is internal gateway state and cannot be supplied")

func (s *Server) CreateProvider(ctx context.Context, req *openshellv1.CreateProviderRequest) (*openshellv1.ProviderResponse, error) {
	r := s.reg
	ws := workspaceOf(req.GetWorkspace())
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.activeWorkspace(ws); err != nil {
		return nil, err
	}
	if req.GetProvider() == nil {
		return nil, status.Error(codes.InvalidArgument, "provider is required")
	}
	p := proto.Clone(req.GetProvider()).(*datamodelv1.Provider)
	if p.Metadata == nil {
		p.Metadata = &datamodelv1.ObjectMeta{}
	}
	m := p.Metadata
	m.Workspace = ws
	if m.Name == "" {
		m.Name = randomName()
	}
	// Upstream keeps a client's created_at_ms (its CLI sends 0); the
	// listing order here is by it, so a missing one is now.
	if m.CreatedAtMs == 0 {
		m.CreatedAtMs = time.Now().UnixMilli()
	}
	m.Id = uuid()
	m.ResourceVersion = 1
	m.DeletionTimestampMs = 0
	if err := validProviderMeta(m); err != nil {
		return nil, invalid(err)
	}
	switch {
	case strings.TrimSpace(p.GetType()) == "":
		return nil, status.Error(codes.InvalidArgument, "provider.type is required")
	case len(p.GetCredentialHandles()) != 0:
		return nil, errProviderHandles
	case p.GetProfileWorkspace() != "" && p.GetProfileWorkspace() != ws:
		return nil, status.Error(codes.InvalidArgument, "profile_workspace must be empty (global) or match the provider workspace")
	case len(p.GetCredentials()) == 0:
		return nil, status.Error(codes.InvalidArgument, "provider.credentials must not be empty")
	}
	if err := validProviderFields(p); err != nil {
		return nil, invalid(err)
	}
	k := key(ws, m.Name)
	if _, ok := r.prov[k]; ok {
		return nil, status.Error(codes.AlreadyExists, "provider already exists")
	}
	if err := r.saveProvider(p); err != nil {
		return nil, status.Error(codes.Internal, fmt.Sprintf("persist provider failed: %v", err))
	}
	r.prov[k] = p
	// Never the credentials, nor their keys' values.
	s.cfg.Logger.Info("provider created", "name", m.Name, "type", p.GetType(), "workspace", ws)
	return &openshellv1.ProviderResponse{Provider: redact(p)}, nil
}

func (s *Server) GetProvider(ctx context.Context, req *openshellv1.GetProviderRequest) (*openshellv1.ProviderResponse, error) {
	ws, err := s.reg.resolveWorkspace(req.GetWorkspace())
	if err != nil {
		return nil, err
	}
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	r := s.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.prov[key(ws, req.GetName())]
	if !ok {
		return nil, status.Error(codes.NotFound, "provider not found")
	}
	return &openshellv1.ProviderResponse{Provider: redact(p)}, nil
}

func (s *Server) ListProviders(ctx context.Context, req *openshellv1.ListProvidersRequest) (*openshellv1.ListProvidersResponse, error) {
	if req.GetAllWorkspaces() && req.GetWorkspace() != "" {
		return nil, status.Error(codes.InvalidArgument, "all_workspaces and workspace are mutually exclusive")
	}
	ws := ""
	if !req.GetAllWorkspaces() {
		var err error
		if ws, err = s.reg.resolveWorkspace(req.GetWorkspace()); err != nil {
			return nil, err
		}
	}
	r := s.reg
	r.mu.Lock()
	var all []*datamodelv1.Provider
	for _, p := range r.prov {
		if req.GetAllWorkspaces() || p.GetMetadata().GetWorkspace() == ws {
			all = append(all, redact(p))
		}
	}
	r.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return listsBefore(all[i].GetMetadata(), all[j].GetMetadata()) })
	return &openshellv1.ListProvidersResponse{Providers: page(all, req.GetOffset(), req.GetLimit())}, nil
}

// mergeStrings is upstream's merge_map: an empty value removes its key.
func mergeStrings(into, from map[string]string) map[string]string {
	for k, v := range from {
		if into == nil {
			into = map[string]string{}
		}
		if v == "" {
			delete(into, k)
		} else {
			into[k] = v
		}
	}
	return into
}

// mergeExpiries is upstream's merge_i64_map: zero or less removes its key.
func mergeExpiries(into, from map[string]int64) map[string]int64 {
	for k, v := range from {
		if into == nil {
			into = map[string]int64{}
		}
		if v <= 0 {
			delete(into, k)
		} else {
			into[k] = v
		}
	}
	return into
}

func (s *Server) UpdateProvider(ctx context.Context, req *openshellv1.UpdateProviderRequest) (*openshellv1.ProviderResponse, error) {
	ws, err := s.reg.resolveWorkspace(req.GetWorkspace())
	if err != nil {
		return nil, err
	}
	in := req.GetProvider()
	if in == nil {
		return nil, status.Error(codes.InvalidArgument, "provider is required")
	}
	name := in.GetMetadata().GetName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "provider.name is required")
	}
	r := s.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	old, ok := r.prov[key(ws, name)]
	if !ok {
		return nil, status.Error(codes.NotFound, "provider not found")
	}
	if t := strings.TrimSpace(in.GetType()); t != "" && !strings.EqualFold(t, strings.TrimSpace(old.GetType())) {
		return nil, status.Error(codes.InvalidArgument, "provider type cannot be changed; delete and recreate the provider")
	}
	if in.GetProfileWorkspace() != "" && in.GetProfileWorkspace() != old.GetProfileWorkspace() {
		return nil, status.Error(codes.InvalidArgument, "profile_workspace cannot be changed; delete and recreate the provider")
	}
	if len(in.GetCredentialHandles()) != 0 {
		return nil, errProviderHandles
	}
	current := old.GetMetadata().GetResourceVersion()
	if want := in.GetMetadata().GetResourceVersion(); want != 0 && want != current {
		return nil, status.Errorf(codes.Aborted, "provider was modified concurrently (current resource_version: %d)", current)
	}
	next := proto.Clone(old).(*datamodelv1.Provider)
	next.Credentials = mergeStrings(next.Credentials, in.GetCredentials())
	next.Config = mergeStrings(next.Config, in.GetConfig())
	next.CredentialExpiresAtMs = mergeExpiries(mergeExpiries(next.CredentialExpiresAtMs, in.GetCredentialExpiresAtMs()), req.GetCredentialExpiresAtMs())
	if err := validProviderMeta(next.GetMetadata()); err != nil {
		return nil, invalid(err)
	}
	if err := validProviderMutable(next); err != nil {
		return nil, invalid(err)
	}
	// Upstream's validate_provider_update_against_attached_sandboxes.
	for _, sb := range r.sandboxesUsing(ws, name) {
		if err := r.uniqueEnvKeys(ws, sb.GetSpec().GetProviders(), next); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "provider update would create credential env key conflict on sandbox '%s': %s", sb.GetMetadata().GetName(), status.Convert(err).Message())
		}
	}
	next.Metadata.ResourceVersion = current + 1
	if err := r.saveProvider(next); err != nil {
		return nil, status.Error(codes.Internal, fmt.Sprintf("update provider failed: %v", err))
	}
	r.prov[key(ws, name)] = next
	s.cfg.Logger.Info("provider updated", "name", name, "workspace", ws)
	return &openshellv1.ProviderResponse{Provider: redact(next)}, nil
}

func (s *Server) DeleteProvider(ctx context.Context, req *openshellv1.DeleteProviderRequest) (*openshellv1.DeleteProviderResponse, error) {
	ws, err := s.reg.resolveWorkspace(req.GetWorkspace())
	if err != nil {
		return nil, err
	}
	name := req.GetName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	r := s.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.prov[key(ws, name)]
	if !ok {
		// Upstream answers a missing provider deleted=false, not NOT_FOUND.
		return &openshellv1.DeleteProviderResponse{}, nil
	}
	if using := r.sandboxesUsing(ws, name); len(using) > 0 {
		names := make([]string, 0, len(using))
		for _, sb := range using {
			names = append(names, sb.GetMetadata().GetName())
		}
		slices.Sort(names)
		return nil, status.Errorf(codes.FailedPrecondition, "provider '%s' is attached to sandbox(es): %s", name, strings.Join(slices.Compact(names), ", "))
	}
	if err := os.Remove(r.providerPath(p)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, fmt.Sprintf("delete provider failed: %v", err))
	}
	delete(r.prov, key(ws, name))
	s.cfg.Logger.Info("provider deleted", "name", name, "workspace", ws)
	return &openshellv1.DeleteProviderResponse{Deleted: true}, nil
}

// sandboxesUsing are the sandboxes of ws that attach provider name.
// Callers hold r.mu.
func (r *registry) sandboxesUsing(ws, name string) []*openshellv1.Sandbox {
	var out []*openshellv1.Sandbox
	for _, sb := range r.byID {
		if sb.pb.GetMetadata().GetWorkspace() == ws && slices.Contains(sb.pb.GetSpec().GetProviders(), name) {
			out = append(out, sb.pb)
		}
	}
	return out
}

// checkProviders is what upstream's handle_create_sandbox asks of the
// providers a new sandbox attaches: each exists in its workspace, and no
// two inject the same variable. Callers hold r.mu.
func (r *registry) checkProviders(ws string, names []string) error {
	for _, name := range names {
		if _, ok := r.prov[key(ws, name)]; !ok {
			return status.Errorf(codes.FailedPrecondition, "provider '%s' not found", name)
		}
	}
	return r.uniqueEnvKeys(ws, names, nil)
}

// uniqueEnvKeys is upstream's validate_provider_environment_keys_unique
// over the credentials' keys (this gateway has no profile-generated
// variables): an unexpired credential's key that is a valid variable
// name belongs to one provider only. candidate, when set, stands in for
// the stored provider of its name. Callers hold r.mu.
func (r *registry) uniqueEnvKeys(ws string, names []string, candidate *datamodelv1.Provider) error {
	now := time.Now().UnixMilli()
	owner := map[string]string{}
	for _, name := range names {
		p := r.prov[key(ws, name)]
		if candidate != nil && candidate.GetMetadata().GetName() == name {
			p = candidate
		}
		if p == nil {
			return status.Errorf(codes.FailedPrecondition, "provider '%s' not found", name)
		}
		keys := make([]string, 0, len(p.GetCredentials()))
		for k := range p.GetCredentials() {
			if exp, ok := p.GetCredentialExpiresAtMs()[k]; envKey(k) && (!ok || exp <= 0 || exp > now) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			if first, ok := owner[k]; ok && first != name {
				return status.Errorf(codes.FailedPrecondition, "credential env key '%s' is provided by both provider '%s' and provider '%s'; use provider-specific env names", k, first, name)
			}
			owner[k] = name
		}
	}
	return nil
}

// providersIn says whether workspace ws holds a provider. Callers hold
// r.mu.
func (r *registry) providersIn(ws string) bool {
	for _, p := range r.prov {
		if p.GetMetadata().GetWorkspace() == ws {
			return true
		}
	}
	return false
}
