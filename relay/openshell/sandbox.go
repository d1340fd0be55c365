package openshell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/openshell/policy"
)

func connectParams(timeout time.Duration) grpc.ConnectParams {
	return grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: timeout}
}

// SandboxID resolves a sandbox name to the object id that exec RPCs take,
// and checks that the sandbox is READY. Ids are cached per name.
func (c *Client) SandboxID(ctx context.Context, name string) (string, error) {
	id, _, err := c.readyID(ctx, name)
	return id, err
}

// readyID is SandboxID, and whether the id came from a cache (no lookup
// checked the sandbox READY just now).
func (c *Client) readyID(ctx context.Context, name string) (id string, cached bool, err error) {
	if id, ok := c.cachedID(name); ok {
		return id, true, nil
	}
	sb, err := c.lookup(ctx, name)
	if err != nil {
		return "", false, err
	}
	if p := sb.GetStatus().GetPhase(); p != openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
		return "", false, fmt.Errorf("sandbox %s: %w (phase %s)", name, relay.ErrNotReady, phaseName(p))
	}
	return sb.GetMetadata().GetId(), false, nil
}

func (c *Client) cachedID(name string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.ids[name]
	if !ok && c.cfg.IDs != nil {
		if id, ok = c.cfg.IDs.LoadID(c.idKey(name)); ok {
			c.ids[name] = id
		}
	}
	return id, ok
}

// remember caches the id of the READY sandbox called name; c.mu is held.
func (c *Client) remember(name, id string) {
	c.ids[name] = id
	if c.cfg.IDs != nil {
		c.cfg.IDs.StoreID(c.idKey(name), id)
	}
}

func (c *Client) forget(name string) {
	c.mu.Lock()
	delete(c.ids, name)
	if c.cfg.IDs != nil {
		c.cfg.IDs.ForgetID(c.idKey(name))
	}
	c.mu.Unlock()
}

// idKey is name's key in cfg.IDs: the gateway, the workspace, the name.
func (c *Client) idKey(name string) string {
	return c.cfg.Target() + " " + c.cfg.Workspace + " " + name
}

// lookupCall is one GetSandbox that callers asking for the same name at
// once share.
type lookupCall struct {
	done chan struct{}
	sb   *openshellv1.Sandbox
	err  error
}

// lookup is GetSandbox of name, one call for the callers that ask at
// once: a run resolves its sandbox for its first exec and for its log
// follow at the same moment, and one round trip serves both. A READY
// sandbox's id is cached for SandboxID. A caller whose ctx is live does
// not inherit the cancellation of the one whose call it waited for.
func (c *Client) lookup(ctx context.Context, name string) (*openshellv1.Sandbox, error) {
	for {
		c.mu.Lock()
		call, waiting := c.lookups[name]
		if !waiting {
			call = &lookupCall{done: make(chan struct{})}
			c.lookups[name] = call
		}
		c.mu.Unlock()
		if !waiting {
			call.sb, call.err = c.get(ctx, name)
			c.mu.Lock()
			delete(c.lookups, name)
			if call.err == nil && call.sb.GetStatus().GetPhase() == openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
				c.remember(name, call.sb.GetMetadata().GetId())
			}
			c.mu.Unlock()
			close(call.done)
			return call.sb, call.err
		}
		select {
		case <-call.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("get sandbox %s: %w", name, ctx.Err())
		}
		if call.err != nil && ctx.Err() == nil && (errors.Is(call.err, context.Canceled) || errors.Is(call.err, context.DeadlineExceeded) ||
			status.Code(call.err) == codes.Canceled || status.Code(call.err) == codes.DeadlineExceeded) {
			// The call ended with its caller's ctx, not with an answer.
			continue
		}
		return call.sb, call.err
	}
}

// logID is the id of the sandbox called name for a log RPC, which needs
// no READY sandbox: the cached one when an exec has resolved it (cached
// says so, and a NotFound for it is then worth one fresh lookup),
// otherwise a lookup.
func (c *Client) logID(ctx context.Context, name string) (id string, cached bool, err error) {
	if id, ok := c.cachedID(name); ok {
		return id, true, nil
	}
	sb, err := c.lookup(ctx, name)
	if err != nil {
		return "", false, err
	}
	return sb.GetMetadata().GetId(), false, nil
}

// Get returns the sandbox called name.
func (c *Client) Get(ctx context.Context, name string) (Info, error) {
	sb, err := c.get(ctx, name)
	return describe(sb), err
}

func (c *Client) get(ctx context.Context, name string) (*openshellv1.Sandbox, error) {
	resp, err := c.api.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: name, Workspace: c.cfg.Workspace})
	if err != nil {
		return nil, c.lifecycleError("get sandbox "+name, err)
	}
	return resp.GetSandbox(), nil
}

// Spec is what a sandbox is created from: the part of upstream's
// CreateSandboxRequest that ferry sets. OpenShell's wire types stop in
// this package; callers say what they want here.
type Spec struct {
	// Name is the sandbox's name; "" lets the gateway choose one.
	Name string
	// Image is the sandbox's image; "" is the gateway's default.
	Image string
	// Env is the sandbox's static environment (SandboxSpec.environment),
	// seen by every process in it. Never put secrets here.
	Env map[string]string
	// Labels are the sandbox's labels, for ListSelected.
	Labels map[string]string
	// Policy is the sandbox's policy (SandboxSpec.policy); nil leaves it to
	// the gateway, which applies its image's or its own default.
	Policy *policy.Policy
	// Providers name the gateway's providers whose credentials it injects
	// into the sandbox (SandboxSpec.providers), so that the sandbox never
	// holds them in a file.
	Providers []string
	// Resources are the sandbox's CPU, memory and GPU.
	Resources Resources
	// Match names labels of Labels that make a sandbox of this name the
	// one Ensure wants: one found without them, or with other values,
	// was made for something else and is an error (*ForeignError), not
	// reused. Create ignores it.
	Match []string
}

// request is the CreateSandboxRequest for s in workspace ws. It always
// carries a spec: a real gateway refuses a create without one ("spec is
// required"), and an empty one takes its defaults.
func (s Spec) request(ws string) *openshellv1.CreateSandboxRequest {
	req := &openshellv1.CreateSandboxRequest{Name: s.Name, Workspace: ws, Labels: s.Labels, Spec: &openshellv1.SandboxSpec{
		Environment: s.Env,
		Policy:      s.Policy.Proto(),
		Providers:   s.Providers,
	}}
	if res := s.Resources.template(); s.Image != "" || res != nil {
		req.Spec.Template = &openshellv1.SandboxTemplate{Image: s.Image, Resources: res}
	}
	req.Spec.ResourceRequirements = s.Resources.requirements()
	return req
}

// Create creates a sandbox from spec and waits until it is READY. A
// sandbox of that name that exists already is an error wrapping
// ErrExists: Ensure is the idempotent form.
func (c *Client) Create(ctx context.Context, spec Spec) (Info, error) {
	req := spec.request(c.cfg.Workspace)
	resp, err := c.api.CreateSandbox(ctx, req)
	if err != nil {
		return Info{}, c.lifecycleError("create sandbox "+req.GetName(), err)
	}
	return c.waitReady(ctx, resp.GetSandbox())
}

// WaitReady follows the status of the sandbox called name until it is
// READY, or fails when it reaches ERROR, is deleted, or is stopped.
func (c *Client) WaitReady(ctx context.Context, name string) (Info, error) {
	sb, err := c.get(ctx, name)
	if err != nil {
		return Info{}, err
	}
	return c.waitReady(ctx, sb)
}

func (c *Client) waitReady(ctx context.Context, sb *openshellv1.Sandbox) (Info, error) {
	got, err := c.watchReady(ctx, sb)
	if err == nil && got.GetStatus().GetPhase() == openshellv1.SandboxPhase_SANDBOX_PHASE_READY && got.GetMetadata().GetName() != "" {
		// The first command into a sandbox just made needs no lookup.
		c.mu.Lock()
		c.remember(got.GetMetadata().GetName(), got.GetMetadata().GetId())
		c.mu.Unlock()
	}
	return describe(got), err
}

func (c *Client) watchReady(ctx context.Context, sb *openshellv1.Sandbox) (*openshellv1.Sandbox, error) {
	name := sb.GetMetadata().GetName()
	if sb.GetStatus().GetPhase() == openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
		return sb, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The last phase seen goes into a deadline's error: "still
	// provisioning" says where a sandbox got stuck.
	last := sb.GetStatus().GetPhase()
	stream, err := c.api.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Id: sb.GetMetadata().GetId(), FollowStatus: true, StopOnTerminal: true})
	if err != nil {
		if cerr := deadlineErr(ctx, err); cerr != nil {
			return nil, fmt.Errorf("wait for sandbox %s: still %s: %w", name, phaseName(last), cerr)
		}
		return nil, c.lifecycleError("watch sandbox "+name, err)
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("watch sandbox %s: %w: watch ended before READY (phase %s)", name, relay.ErrNotReady, phaseName(last))
		}
		if err != nil {
			if cerr := deadlineErr(ctx, err); cerr != nil {
				return nil, fmt.Errorf("wait for sandbox %s: still %s: %w", name, phaseName(last), cerr)
			}
			return nil, c.lifecycleError("watch sandbox "+name, err)
		}
		got := ev.GetSandbox()
		if got == nil {
			continue
		}
		last = got.GetStatus().GetPhase()
		switch p := last; p {
		case openshellv1.SandboxPhase_SANDBOX_PHASE_READY:
			return got, nil
		case openshellv1.SandboxPhase_SANDBOX_PHASE_ERROR, openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING,
			// Upstream's watch ends only at READY: a stopped sandbox would
			// keep it open until ctx ends.
			openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING, openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED:
			return nil, fmt.Errorf("sandbox %s: %w (phase %s)", name, relay.ErrNotReady, phaseName(p))
		}
	}
}

// Delete deletes the sandbox called name. A sandbox that does not exist
// is an error wrapping relay.ErrNotFound.
func (c *Client) Delete(ctx context.Context, name string) error {
	c.forget(name)
	_, err := c.api.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: name, Workspace: c.cfg.Workspace})
	if err != nil {
		return c.lifecycleError("delete sandbox "+name, err)
	}
	return nil
}

// Stop stops the sandbox called name: every process in it ends, its files
// stay. It returns the STOPPED sandbox; stopping a stopped one is not an
// error. A sandbox that is not READY is an error wrapping relay.ErrNotReady.
func (c *Client) Stop(ctx context.Context, name string) (Info, error) {
	resp, err := c.api.StopSandbox(ctx, &openshellv1.StopSandboxRequest{Name: name, Workspace: c.cfg.Workspace})
	if err != nil {
		return Info{}, c.lifecycleError("stop sandbox "+name, err)
	}
	return describe(resp.GetSandbox()), nil
}

// Start starts the stopped sandbox called name and waits until it is
// READY. Starting a READY sandbox is not an error; one in another phase is
// an error wrapping relay.ErrNotReady.
func (c *Client) Start(ctx context.Context, name string) (Info, error) {
	resp, err := c.api.StartSandbox(ctx, &openshellv1.StartSandboxRequest{Name: name, Workspace: c.cfg.Workspace})
	if err != nil {
		return Info{}, c.lifecycleError("start sandbox "+name, err)
	}
	return c.waitReady(ctx, resp.GetSandbox())
}

// List returns the sandboxes of the client's workspace.
func (c *Client) List(ctx context.Context) ([]Info, error) {
	return c.ListSelected(ctx, "")
}

// ListSelected returns the sandboxes of the client's workspace that carry
// every label of selector, upstream's "key=value,key2=value2" ("" is
// all). A selector the gateway cannot parse is an error wrapping
// ErrInvalidRequest.
func (c *Client) ListSelected(ctx context.Context, selector string) ([]Info, error) {
	return listAll(ctx, "sandboxes", func(ctx context.Context, off uint32) ([]*openshellv1.Sandbox, error) {
		resp, err := c.api.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{Limit: listPage, Offset: off, Workspace: c.cfg.Workspace, LabelSelector: selector})
		if err != nil {
			return nil, c.lifecycleError("list sandboxes", err)
		}
		return resp.GetSandboxes(), nil
	}, describe)
}

// ErrInvalidRequest means the gateway refused a lifecycle request's
// fields, such as a sandbox name.
var ErrInvalidRequest = errors.New("openshell: invalid request")

// ErrUnreachable means a lifecycle RPC could not reach the gateway (down,
// refused, TLS handshake failed).
var ErrUnreachable = errors.New("openshell: gateway unreachable")

// ErrNoWorkspace means the client's workspace does not exist on the
// gateway. It is not relay.ErrNotFound: no sandbox lookup was made.
var ErrNoWorkspace = errors.New("openshell: workspace not found")

// lifecycleError is statusError, except that UNAVAILABLE outside an exec
// means the gateway itself could not be reached, NOT_FOUND for the
// workspace is not a missing sandbox, and a create refused for an unknown
// provider names it (ErrProviderNotFound), not relay.ErrNotReady.
func (c *Client) lifecycleError(action string, err error) error {
	var le lookupError
	if errors.As(err, &le) {
		return le.err
	}
	if name, ok := missingProvider(err); ok {
		return fmt.Errorf("%s: %w: %s", action, ErrProviderNotFound, name)
	}
	if status.Code(err) == codes.NotFound && strings.HasPrefix(status.Convert(err).Message(), "workspace '") {
		return fmt.Errorf("%s in workspace %s: %w", action, c.cfg.Workspace, ErrNoWorkspace)
	}
	switch status.Code(err) {
	case codes.Unavailable:
		return fmt.Errorf("%s: %w at %s: %s", action, ErrUnreachable, c.cfg.Endpoint, status.Convert(err).Message())
	case codes.InvalidArgument:
		// Outside exec it is the request, not a command, that is wrong.
		return fmt.Errorf("%s: %w: %s", action, ErrInvalidRequest, status.Convert(err).Message())
	}
	return statusError(action, err)
}

// Info is a sandbox as ferry shows it: the fields of upstream's Sandbox
// that a person or a script asks for.
type Info struct {
	Name      string
	ID        string
	Workspace string
	// Phase is upstream's phase without its enum prefix, lower case:
	// "ready", "provisioning", "stopped", ...
	Phase   string
	Created time.Time // zero if the gateway did not say
	Labels  map[string]string
	// Providers are the providers attached to it (SandboxSpec.providers).
	Providers []string
	// Resources are what its spec asks for.
	Resources Resources
}

// describe is sb as an Info; a nil sb is the zero Info.
func describe(sb *openshellv1.Sandbox) Info {
	if sb == nil {
		return Info{}
	}
	i := Info{
		Name:      sb.GetMetadata().GetName(),
		ID:        sb.GetMetadata().GetId(),
		Workspace: sb.GetMetadata().GetWorkspace(),
		Phase:     phaseName(sb.GetStatus().GetPhase()),
		Labels:    sb.GetMetadata().GetLabels(),
		Providers: sb.GetSpec().GetProviders(),
		Resources: resourcesOf(sb.GetSpec()),
	}
	if ms := sb.GetMetadata().GetCreatedAtMs(); ms > 0 {
		i.Created = time.UnixMilli(ms)
	}
	return i
}

// phaseName is a phase without its enum prefix, lower case: "ready".
func phaseName(p openshellv1.SandboxPhase) string {
	const prefix = "SANDBOX_PHASE_"
	s := p.String()
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		s = s[len(prefix):]
	}
	b := []byte(s)
	for i, ch := range b {
		if ch >= 'A' && ch <= 'Z' {
			b[i] = ch + 'a' - 'A'
		}
	}
	return string(b)
}

// deadlineErr is the caller's context error behind an RPC's err, or nil.
// gRPC times a deadline with its own timer, which may fire (as
// DEADLINE_EXCEEDED) an instant before ctx says it has ended.
func deadlineErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if _, ok := ctx.Deadline(); ok && status.Code(err) == codes.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return nil
}
