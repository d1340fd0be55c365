package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	datamodelv1 "github.com/ferry-dev/ferry/proto/openshell/datamodel/v1"
	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
)

// Workspaces are upstream's (openshell-server grpc/workspace.rs at
// v0.0.111): namespaces of sandbox names. "default" always exists and
// cannot be deleted; a request naming no workspace means it; any other
// must have been created first. Deleting one marks it TERMINATING before
// it looks for sandboxes, so a delete refused because sandboxes remain
// leaves it TERMINATING: it takes no new sandboxes, and a later delete,
// once it is empty, removes it.
//
// On disk a workspace is root/.gateway/workspaces/<name>.json, and its
// sandboxes live in root/.ws/<workspace>/<name>, except the default
// workspace's, which live in root/<name> as they always have. Sandbox
// names are DNS labels, so neither ".gateway" nor ".ws" can be one.

const defaultWorkspace = "default"

// maxPageSize and defaultPageSize are upstream's MAX_PAGE_SIZE and the
// default its List handlers give clamp_limit.
const (
	maxPageSize     = 1000
	defaultPageSize = 100
)

// clampLimit is upstream's clamp_limit: 0 means the default, and more
// than the maximum means the maximum.
func clampLimit(limit uint32) int {
	switch {
	case limit == 0:
		return defaultPageSize
	case limit > maxPageSize:
		return maxPageSize
	}
	return int(limit)
}

// page cuts offset and limit out of a list, as SQL's LIMIT/OFFSET would.
func page[T any](all []T, offset, limit uint32) []T {
	off := min(int(offset), len(all))
	all = all[off:]
	return all[:min(clampLimit(limit), len(all))]
}

func (r *registry) workspaceDir() string { return filepath.Join(r.metaDir(), "workspaces") }

func (r *registry) workspacePath(name string) string {
	return filepath.Join(r.workspaceDir(), name+".json")
}

// sandboxDir is where a sandbox lives.
func (r *registry) sandboxDir(workspace, name string) string {
	if workspace == defaultWorkspace {
		return filepath.Join(r.root, name)
	}
	return filepath.Join(r.root, ".ws", workspace, name)
}

// loadWorkspaces reads the workspace records and makes the default
// workspace if there is none, as upstream's ensure_default_workspace does
// at start.
func (r *registry) loadWorkspaces() error {
	if err := os.MkdirAll(r.workspaceDir(), 0o700); err != nil {
		return fmt.Errorf("create workspace dir: %w", err)
	}
	ents, err := os.ReadDir(r.workspaceDir())
	if err != nil {
		return fmt.Errorf("read workspace dir: %w", err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(r.workspaceDir(), e.Name()))
		if err != nil {
			return fmt.Errorf("read workspace record: %w", err)
		}
		w := &datamodelv1.Workspace{}
		if err := protojson.Unmarshal(b, w); err != nil {
			return fmt.Errorf("parse workspace record %s: %w", e.Name(), err)
		}
		r.ws[w.GetMetadata().GetName()] = w
	}
	if _, ok := r.ws[defaultWorkspace]; !ok {
		return r.addWorkspace(defaultWorkspace, nil)
	}
	return nil
}

// addWorkspace records a new ACTIVE workspace. Callers hold r.mu, or own r
// still.
func (r *registry) addWorkspace(name string, labels map[string]string) error {
	w := &datamodelv1.Workspace{
		Metadata: &datamodelv1.ObjectMeta{
			Id:              uuid(),
			Name:            name,
			CreatedAtMs:     time.Now().UnixMilli(),
			Labels:          labels,
			ResourceVersion: 1,
		},
		Status: &datamodelv1.WorkspaceStatus{Phase: datamodelv1.WorkspacePhase_WORKSPACE_PHASE_ACTIVE},
	}
	if err := r.saveWorkspace(w); err != nil {
		return err
	}
	r.ws[name] = w
	return nil
}

func (r *registry) saveWorkspace(w *datamodelv1.Workspace) error {
	b, err := protojson.Marshal(w)
	if err != nil {
		return err
	}
	path := r.workspacePath(w.GetMetadata().GetName())
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return fmt.Errorf("write workspace record: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("write workspace record: %w", err)
	}
	return nil
}

// adoptAll registers the records read at start. Those of the default
// workspace go first: a gateway before workspaces kept every sandbox in
// root/<name>, one name across all workspaces, so a record of another
// workspace whose directory is still there moves it to where it now
// belongs, unless a default-workspace sandbox owns that name.
func (r *registry) adoptAll(recs []loaded) error {
	sort.SliceStable(recs, func(i, j int) bool {
		return workspaceOf(recs[i].pb.GetMetadata().GetWorkspace()) == defaultWorkspace &&
			workspaceOf(recs[j].pb.GetMetadata().GetWorkspace()) != defaultWorkspace
	})
	for _, rec := range recs {
		if err := r.adopt(rec.pb, rec.file); err != nil {
			return err
		}
	}
	return nil
}

func (r *registry) adopt(pb *openshellv1.Sandbox, file string) error {
	meta := pb.GetMetadata()
	ws := workspaceOf(meta.GetWorkspace())
	meta.Workspace = ws
	if _, ok := r.ws[ws]; !ok {
		// An old gateway took any workspace name without its being
		// created; its sandboxes stay reachable.
		if err := r.addWorkspace(ws, nil); err != nil {
			return err
		}
	}
	dir := r.sandboxDir(ws, meta.GetName())
	if ws != defaultWorkspace {
		old := r.sandboxDir(defaultWorkspace, meta.GetName())
		_, owned := r.name[key(defaultWorkspace, meta.GetName())]
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) && !owned {
			if _, err := os.Stat(old); err == nil {
				if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
					return fmt.Errorf("move sandbox %s to its workspace: %w", meta.GetName(), err)
				}
				if err := os.Rename(old, dir); err != nil {
					return fmt.Errorf("move sandbox %s to its workspace: %w", meta.GetName(), err)
				}
			}
		}
	}
	sb := &sandbox{pb: pb, dir: dir, cancels: map[*execTicket]func(error){}}
	if file != filepath.Base(r.recordPath(pb, recordExt)) {
		// An old gateway named records by sandbox name, or kept them as
		// JSON; save writes the binary record by id.
		if err := r.save(sb); err != nil {
			return err
		}
		if err := os.Remove(filepath.Join(r.metaDir(), file)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove old sandbox record: %w", err)
		}
	}
	r.byID[meta.GetId()] = sb
	r.name[key(ws, meta.GetName())] = sb
	return nil
}

func workspaceNotFound(name string) error {
	return status.Errorf(codes.NotFound, "workspace '%s' not found", name)
}

// activeWorkspace is upstream's resolve_workspace followed by
// ensure_active, for the calls that create. Callers hold r.mu.
func (r *registry) activeWorkspace(name string) error {
	w, ok := r.ws[name]
	switch {
	case !ok:
		return workspaceNotFound(name)
	case w.GetMetadata().GetDeletionTimestampMs() != 0:
		return status.Errorf(codes.FailedPrecondition, "workspace '%s' is being deleted", name)
	}
	return nil
}

// named checks a request that names a sandbox in a workspace, in
// upstream's order: the name is required (INVALID_ARGUMENT), then the
// workspace must exist (NOT_FOUND), before the sandbox is looked for.
func (r *registry) named(workspace, name string) error {
	if name == "" {
		return status.Error(codes.InvalidArgument, "name is required")
	}
	_, err := r.resolveWorkspace(workspace)
	return err
}

// resolveWorkspace is upstream's resolve_workspace: the workspace a
// request names ("" is the default), which must exist, terminating or not.
func (r *registry) resolveWorkspace(name string) (string, error) {
	name = workspaceOf(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.ws[name]; !ok {
		return "", workspaceNotFound(name)
	}
	return name, nil
}

// listsBefore orders objects as upstream's store lists them: by creation
// time, then name, workspace and id.
func listsBefore(a, b *datamodelv1.ObjectMeta) bool {
	if a.GetCreatedAtMs() != b.GetCreatedAtMs() {
		return a.GetCreatedAtMs() < b.GetCreatedAtMs()
	}
	if a.GetName() != b.GetName() {
		return a.GetName() < b.GetName()
	}
	if a.GetWorkspace() != b.GetWorkspace() {
		return a.GetWorkspace() < b.GetWorkspace()
	}
	return a.GetId() < b.GetId()
}

func validWorkspaceName(name string) error {
	switch {
	case name == "":
		return errors.New("workspace name is required")
	case len(name) > maxNameLen:
		return fmt.Errorf("workspace name exceeds maximum length (%d > %d)", len(name), maxNameLen)
	}
	return validDNSLabel(name, "workspace name")
}

func (s *Server) CreateWorkspace(ctx context.Context, req *openshellv1.CreateWorkspaceRequest) (*openshellv1.CreateWorkspaceResponse, error) {
	if err := validWorkspaceName(req.GetName()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := validLabels(req.GetLabels()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	r := s.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.ws[req.GetName()]; ok {
		return nil, status.Error(codes.AlreadyExists, "workspace already exists")
	}
	if err := r.addWorkspace(req.GetName(), req.GetLabels()); err != nil {
		return nil, status.Error(codes.Internal, fmt.Sprintf("persist workspace failed: %v", err))
	}
	s.cfg.Logger.Info("workspace created", "name", req.GetName())
	return &openshellv1.CreateWorkspaceResponse{Workspace: proto.Clone(r.ws[req.GetName()]).(*datamodelv1.Workspace)}, nil
}

func (s *Server) GetWorkspace(ctx context.Context, req *openshellv1.GetWorkspaceRequest) (*openshellv1.GetWorkspaceResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	r := s.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.ws[req.GetName()]
	if !ok {
		return nil, status.Error(codes.NotFound, "workspace not found")
	}
	return &openshellv1.GetWorkspaceResponse{Workspace: proto.Clone(w).(*datamodelv1.Workspace)}, nil
}

func (s *Server) ListWorkspaces(ctx context.Context, req *openshellv1.ListWorkspacesRequest) (*openshellv1.ListWorkspacesResponse, error) {
	want, err := parseSelector(req.GetLabelSelector())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	r := s.reg
	r.mu.Lock()
	var all []*datamodelv1.Workspace
	for _, w := range r.ws {
		if matchSelector(want, w.GetMetadata().GetLabels()) {
			all = append(all, proto.Clone(w).(*datamodelv1.Workspace))
		}
	}
	r.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return listsBefore(all[i].GetMetadata(), all[j].GetMetadata()) })
	return &openshellv1.ListWorkspacesResponse{Workspaces: page(all, req.GetOffset(), req.GetLimit())}, nil
}

func (s *Server) DeleteWorkspace(ctx context.Context, req *openshellv1.DeleteWorkspaceRequest) (*openshellv1.DeleteWorkspaceResponse, error) {
	name := req.GetName()
	switch name {
	case "":
		return nil, status.Error(codes.InvalidArgument, "name is required")
	case defaultWorkspace:
		return nil, status.Error(codes.FailedPrecondition, "the default workspace cannot be deleted")
	}
	r := s.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.ws[name]
	if !ok {
		return nil, workspaceNotFound(name)
	}
	if w.GetMetadata().GetDeletionTimestampMs() == 0 {
		// Marked before the scan, as upstream does, so that a refused
		// delete still closes the workspace to new sandboxes.
		next := proto.Clone(w).(*datamodelv1.Workspace)
		next.Metadata.DeletionTimestampMs = time.Now().UnixMilli()
		next.Metadata.ResourceVersion++
		next.Status = &datamodelv1.WorkspaceStatus{Phase: datamodelv1.WorkspacePhase_WORKSPACE_PHASE_TERMINATING}
		if err := r.saveWorkspace(next); err != nil {
			return nil, status.Error(codes.Internal, fmt.Sprintf("mark workspace terminating failed: %v", err))
		}
		r.ws[name] = next
	}
	// Upstream's order of the kinds it checks; of them this gateway has
	// sandboxes and providers.
	var blocking []string
	for _, sb := range r.byID {
		if sb.pb.GetMetadata().GetWorkspace() == name {
			blocking = append(blocking, "sandbox")
			break
		}
	}
	if r.providersIn(name) {
		blocking = append(blocking, "provider")
	}
	if len(blocking) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "workspace '%s' still contains resources: %s", name, strings.Join(blocking, ", "))
	}
	if err := os.Remove(r.workspacePath(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, fmt.Sprintf("delete workspace failed: %v", err))
	}
	delete(r.ws, name)
	// Empty once its sandboxes are gone; what else is there is not ours
	// to remove.
	_ = os.Remove(filepath.Join(r.root, ".ws", name))
	s.cfg.Logger.Info("workspace deleted", "name", name)
	return &openshellv1.DeleteWorkspaceResponse{Deleted: true}, nil
}
