package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	datamodelv1 "github.com/ferry-dev/ferry/proto/openshell/datamodel/v1"
	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// maxNameLen is upstream's MAX_ROUTABLE_NAME_LEN: a sandbox name becomes a
// DNS label in routed hostnames.
const maxNameLen = 19

func validName(name string) error {
	if len(name) > maxNameLen {
		return fmt.Errorf("name exceeds maximum length (%d > %d)", len(name), maxNameLen)
	}
	return validDNSLabel(name, "name")
}

// validDNSLabel is upstream's validate_dns1123_label, its checks in its
// order; field names the value in the message.
func validDNSLabel(name, field string) error {
	switch {
	case strings.ContainsFunc(name, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') }):
		return fmt.Errorf("%s must contain only lowercase alphanumeric characters or hyphens", field)
	case strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-"):
		return fmt.Errorf("%s must not start or end with a hyphen", field)
	case strings.Contains(name, "--"):
		return fmt.Errorf("%s must not contain consecutive hyphens", field)
	}
	return nil
}

// sandbox is one sandbox's record. Its fields are guarded by registry.mu.
type sandbox struct {
	pb      *openshellv1.Sandbox
	dir     string
	watch   []chan struct{} // closed on every change
	gone    bool            // deleted; pb holds its last state
	cancels map[*execTicket]func(cause error)
}

// execTicket is one running exec; done is closed once it has ended.
type execTicket struct{ done chan struct{} }

// execStopTimeout bounds how long DeleteSandbox waits for the execs it
// stopped. Their process groups are killed at once; what may linger is an
// RPC blocked sending output to a client that does not read.
const execStopTimeout = 5 * time.Second

// registry holds the sandboxes and persists their records under
// root/.gateway so that a restarted gateway knows them again.
type registry struct {
	root string
	mu   sync.Mutex
	byID map[string]*sandbox
	name map[string]*sandbox // workspace + "/" + name
	ws   map[string]*datamodelv1.Workspace
	prov map[string]*datamodelv1.Provider // workspace + "/" + name (providers.go)
}

func newRegistry(root string) (*registry, error) {
	r := &registry{root: root, byID: map[string]*sandbox{}, name: map[string]*sandbox{}, ws: map[string]*datamodelv1.Workspace{}, prov: map[string]*datamodelv1.Provider{}}
	if err := r.loadWorkspaces(); err != nil {
		return nil, err
	}
	if err := r.loadProviders(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.metaDir(), 0o700); err != nil {
		return nil, fmt.Errorf("create gateway state dir: %w", err)
	}
	pbs, err := r.loadRecords()
	if err != nil {
		return nil, err
	}
	if err := r.adoptAll(pbs); err != nil {
		return nil, err
	}
	return r, nil
}

func key(workspace, name string) string { return workspace + "/" + name }

func (r *registry) metaDir() string { return filepath.Join(r.root, ".gateway") }

var errExists = errors.New("sandbox already exists")

// create records a new sandbox in PROVISIONING and makes its directory.
func (r *registry) create(req *openshellv1.CreateSandboxRequest) (*openshellv1.Sandbox, error) {
	ws := workspaceOf(req.GetWorkspace())
	name := req.GetName()
	// Upstream's order: the request's fields (the spec's defaults and
	// size first), then the workspace, then the providers, then the
	// policy's safety, then a generated name, and only then anything that
	// exists.
	if err := checkSpec(req.GetSpec()); err != nil {
		return nil, err
	}
	if err := validCreate(req); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.activeWorkspace(ws); err != nil {
		return nil, err
	}
	if err := r.checkProviders(ws, req.GetSpec().GetProviders()); err != nil {
		return nil, err
	}
	if err := checkPolicy(req.GetSpec().GetPolicy()); err != nil {
		return nil, err
	}
	if name == "" {
		name = r.freeName(ws)
	}
	if _, ok := r.name[key(ws, name)]; ok {
		return nil, errExists
	}
	dir := r.sandboxDir(ws, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create sandbox dir: %w", err)
	}
	id := uuid()
	pb := &openshellv1.Sandbox{
		Metadata: &datamodelv1.ObjectMeta{
			Id:          id,
			Name:        name,
			CreatedAtMs: time.Now().UnixMilli(),
			Labels:      req.GetLabels(),
			Annotations: req.GetAnnotations(),
			Workspace:   ws,
		},
		Spec:   req.GetSpec(),
		Status: &openshellv1.SandboxStatus{SandboxName: name, Phase: openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING},
	}
	sb := &sandbox{pb: pb, dir: dir, cancels: map[*execTicket]func(error){}}
	if err := r.save(sb); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r.byID[id] = sb
	r.name[key(ws, name)] = sb
	return proto.Clone(pb).(*openshellv1.Sandbox), nil
}

// setPhase changes a sandbox's phase and wakes its watchers.
func (r *registry) setPhase(id string, phase openshellv1.SandboxPhase) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.byID[id]
	if !ok {
		return
	}
	sb.pb.Status.Phase = phase
	sb.pb.Metadata.ResourceVersion++
	_ = r.save(sb)
	r.notify(sb)
}

func (r *registry) notify(sb *sandbox) {
	for _, ch := range sb.watch {
		close(ch)
	}
	sb.watch = nil
}

func (r *registry) get(workspace, name string) (*openshellv1.Sandbox, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.name[key(workspaceOf(workspace), name)]
	if !ok {
		return nil, false
	}
	return proto.Clone(sb.pb).(*openshellv1.Sandbox), true
}

func (r *registry) lookup(id string) (*sandbox, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.byID[id]
	return sb, ok
}

// record returns a copy of sb's record. Unlike snapshot it registers no
// watch, which would stay in sb.watch until the sandbox next changes.
func (r *registry) record(sb *sandbox) *openshellv1.Sandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	return proto.Clone(sb.pb).(*openshellv1.Sandbox)
}

// snapshot returns a copy of sb's record, whether it is gone, and a channel
// closed at its next change.
func (r *registry) snapshot(sb *sandbox) (*openshellv1.Sandbox, bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan struct{})
	if !sb.gone {
		sb.watch = append(sb.watch, ch)
	}
	return proto.Clone(sb.pb).(*openshellv1.Sandbox), sb.gone, ch
}

// list returns the sandboxes of workspace (or of all) that carry every
// label in want, by name.
func (r *registry) list(workspace string, all bool, want map[string]string) []*openshellv1.Sandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := workspaceOf(workspace)
	var out []*openshellv1.Sandbox
	for _, sb := range r.byID {
		if (all || sb.pb.GetMetadata().GetWorkspace() == ws) && matchSelector(want, sb.pb.GetMetadata().GetLabels()) {
			out = append(out, proto.Clone(sb.pb).(*openshellv1.Sandbox))
		}
	}
	sort.Slice(out, func(i, j int) bool { return listsBefore(out[i].GetMetadata(), out[j].GetMetadata()) })
	return out
}

// track registers a running exec so that deleting or stopping its sandbox
// stops it, with that as cause. It refuses a sandbox that is not READY:
// admit saw it READY, but a stop may have come since.
func (r *registry) track(id string, cancel func(cause error)) (untrack func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.byID[id]
	if !ok {
		return nil, status.Error(codes.NotFound, "sandbox not found")
	}
	if sb.pb.GetStatus().GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
		return nil, status.Error(codes.FailedPrecondition, "sandbox is not ready")
	}
	t := &execTicket{done: make(chan struct{})}
	sb.cancels[t] = cancel
	return func() {
		r.mu.Lock()
		delete(sb.cancels, t)
		r.mu.Unlock()
		close(t.done)
	}, nil
}

// cancelAll ends every running exec and relay of sb with cause and
// returns their tickets, for waitTickets. registry.mu is held.
func (sb *sandbox) cancelAll(cause error) []*execTicket {
	var running []*execTicket
	for t, cancel := range sb.cancels {
		cancel(cause)
		running = append(running, t)
	}
	return running
}

// remove marks a sandbox DELETING, stops its execs, has endProcs end
// every other process it started, and deletes its directory and record.
func (r *registry) remove(workspace, name string, endProcs func(id string)) (bool, error) {
	r.mu.Lock()
	sb, ok := r.name[key(workspaceOf(workspace), name)]
	if !ok {
		r.mu.Unlock()
		return false, nil
	}
	sb.pb.Status.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_DELETING
	sb.pb.Metadata.DeletionTimestampMs = time.Now().UnixMilli()
	running := sb.cancelAll(errDeleted)
	sb.gone = true
	r.notify(sb)
	delete(r.byID, sb.pb.GetMetadata().GetId())
	delete(r.name, key(sb.pb.GetMetadata().GetWorkspace(), name))
	r.mu.Unlock()

	// Until its exec has ended, a process may still be creating files in
	// the directory, and RemoveAll racing it fails with ENOTEMPTY.
	waitTickets(running, execStopTimeout)
	endProcs(sb.pb.GetMetadata().GetId())
	err := os.RemoveAll(sb.dir)
	if rerr := r.removeRecord(sb.pb); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return true, fmt.Errorf("remove sandbox %s: %w", name, err)
	}
	return true, nil
}

func workspaceOf(ws string) string {
	if ws == "" {
		return "default"
	}
	return ws
}

// uuid returns a random (version 4) UUID, the form upstream gives ids.
func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
