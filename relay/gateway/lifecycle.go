package gateway

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
)

// errStopped is why a running exec or SSH relay ends when its sandbox is
// stopped. Clients see it as upstream's do when the sandbox's supervisor
// goes away under them: the relay closes before an exit status.
var errStopped = errors.New("gateway: sandbox stopped")

// Upstream's reasons and messages for the Ready condition it writes at each
// lifecycle step.
const (
	reasonStopping = "Stopping"
	reasonStopped  = "Stopped"
	reasonStarting = "Starting"
	msgStopping    = "Sandbox stop requested"
	msgStopped     = "Sandbox compute is stopped"
	msgStarting    = "Sandbox start requested"
)

// StopSandbox ends every process of a READY sandbox (its execs and SSH
// relays, and whatever they detached, as upstream's driver stopping the
// sandbox's container does), revokes its SSH session tokens, and leaves
// it STOPPED with its files. The answer is the STOPPED record. Stopping a
// STOPPED sandbox does nothing and succeeds, as upstream.
func (s *Server) StopSandbox(ctx context.Context, req *openshellv1.StopSandboxRequest) (*openshellv1.SandboxResponse, error) {
	if err := s.reg.named(req.GetWorkspace(), req.GetName()); err != nil {
		return nil, err
	}
	// One lifecycle change at a time: a start waits for the stop before it
	// to finish, then finds the sandbox STOPPED.
	s.life.Lock()
	defer s.life.Unlock()
	pb, running, already, err := s.reg.beginStop(req.GetWorkspace(), req.GetName())
	if err != nil {
		return nil, err
	}
	id := pb.GetMetadata().GetId()
	s.ssh.revokeSandbox(id)
	if already {
		return &openshellv1.SandboxResponse{Sandbox: pb}, nil
	}
	s.logEvent(id, "sandbox stopping", map[string]string{"name": req.GetName()})
	// The stop is committed once STOPPING is stored, so the caller going
	// away does not cut this wait short; the timer bounds it.
	waitTickets(running, execStopTimeout)
	s.endProcs(id)
	pb, err = s.reg.finishStop(id)
	if err != nil {
		return nil, err
	}
	s.logEvent(id, "sandbox stopped", nil)
	s.cfg.Logger.Info("sandbox stopped", "name", req.GetName(), "id", id)
	return &openshellv1.SandboxResponse{Sandbox: pb}, nil
}

// StartSandbox moves a STOPPED sandbox to STARTING, and READY after the
// gateway's ReadyDelay. The answer is the STARTING record, as upstream's
// (its driver reports READY later); starting a READY sandbox does nothing
// and succeeds.
func (s *Server) StartSandbox(ctx context.Context, req *openshellv1.StartSandboxRequest) (*openshellv1.SandboxResponse, error) {
	if err := s.reg.named(req.GetWorkspace(), req.GetName()); err != nil {
		return nil, err
	}
	s.life.Lock()
	defer s.life.Unlock()
	pb, already, err := s.reg.beginStart(req.GetWorkspace(), req.GetName())
	if err != nil {
		return nil, err
	}
	if already {
		return &openshellv1.SandboxResponse{Sandbox: pb}, nil
	}
	id := pb.GetMetadata().GetId()
	s.logEvent(id, "sandbox starting", map[string]string{"name": req.GetName()})
	s.mu.Lock()
	if !s.closed {
		if t, ok := s.timers[id]; ok {
			t.Stop()
		}
		s.timers[id] = time.AfterFunc(s.cfg.ReadyDelay, func() {
			s.mu.Lock()
			delete(s.timers, id)
			s.mu.Unlock()
			s.finishStart(id)
		})
	}
	s.mu.Unlock()
	s.cfg.Logger.Info("sandbox starting", "name", req.GetName(), "id", id)
	return &openshellv1.SandboxResponse{Sandbox: pb}, nil
}

// finishStart makes a STARTING sandbox READY.
func (s *Server) finishStart(id string) {
	sb, ok := s.reg.lookup(id)
	if !ok || s.reg.record(sb).GetStatus().GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING {
		return
	}
	// The record first, outside the registry's lock (the log book takes
	// it): whoever sees the sandbox READY finds the event in its log.
	s.logEvent(id, "sandbox ready", nil)
	if s.reg.readyIfStarting(id) {
		s.cfg.Logger.Info("sandbox started", "id", id)
	}
}

// recoverLifecycle finishes what a previous run left half done, as
// upstream's startup recovery does: a STOPPING sandbox's processes (what
// it detached may have outlived that run) are ended and it is STOPPED; a
// STARTING one is READY.
func (s *Server) recoverLifecycle() {
	for _, pb := range s.reg.list("", true, nil) {
		id := pb.GetMetadata().GetId()
		switch pb.GetStatus().GetPhase() {
		case openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING:
			s.endProcs(id)
			if _, err := s.reg.finishStop(id); err == nil {
				s.logEvent(id, "sandbox stopped", nil)
			}
		case openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING:
			s.finishStart(id)
		}
	}
}

// waitTickets waits until every ticket is done, or d has passed.
func waitTickets(running []*execTicket, d time.Duration) {
	wait := time.NewTimer(d)
	defer wait.Stop()
	for _, t := range running {
		select {
		case <-t.done:
		case <-wait.C:
			return
		}
	}
}

// phaseName is a phase as upstream names it in lifecycle errors.
func phaseName(p openshellv1.SandboxPhase) string {
	n := strings.TrimPrefix(p.String(), "SANDBOX_PHASE_")
	if n == "" {
		return "Unknown"
	}
	return n[:1] + strings.ToLower(n[1:])
}

// beginStop marks a READY sandbox STOPPING and cancels its execs, whose
// tickets it returns. already is set when the sandbox was STOPPED.
func (r *registry) beginStop(workspace, name string) (pb *openshellv1.Sandbox, running []*execTicket, already bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.name[key(workspaceOf(workspace), name)]
	if !ok {
		return nil, nil, false, status.Error(codes.NotFound, "sandbox not found")
	}
	switch phase := sb.pb.GetStatus().GetPhase(); phase {
	case openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED:
		return proto.Clone(sb.pb).(*openshellv1.Sandbox), nil, true, nil
	case openshellv1.SandboxPhase_SANDBOX_PHASE_READY:
		if err := r.setLifecycle(sb, openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING, reasonStopping, msgStopping); err != nil {
			return nil, nil, false, err
		}
	case openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING:
		// A stop that did not finish (the lifecycle lock is held, so no
		// other stop is running): finish it.
	default:
		return nil, nil, false, status.Errorf(codes.FailedPrecondition, "sandbox must be Ready to stop (current phase: %s)", phaseName(phase))
	}
	running = sb.cancelAll(errStopped)
	return proto.Clone(sb.pb).(*openshellv1.Sandbox), running, false, nil
}

// finishStop makes a STOPPING sandbox STOPPED.
func (r *registry) finishStop(id string) (*openshellv1.Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.byID[id]
	if !ok {
		return nil, status.Error(codes.NotFound, "sandbox not found")
	}
	switch sb.pb.GetStatus().GetPhase() {
	case openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED:
	case openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING:
		if err := r.setLifecycle(sb, openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED, reasonStopped, msgStopped); err != nil {
			return nil, err
		}
	default:
		return nil, status.Error(codes.Aborted, "sandbox lifecycle changed while stop completed")
	}
	return proto.Clone(sb.pb).(*openshellv1.Sandbox), nil
}

// beginStart marks a STOPPED sandbox STARTING. already is set when it was
// READY.
func (r *registry) beginStart(workspace, name string) (pb *openshellv1.Sandbox, already bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.name[key(workspaceOf(workspace), name)]
	if !ok {
		return nil, false, status.Error(codes.NotFound, "sandbox not found")
	}
	switch phase := sb.pb.GetStatus().GetPhase(); phase {
	case openshellv1.SandboxPhase_SANDBOX_PHASE_READY:
		return proto.Clone(sb.pb).(*openshellv1.Sandbox), true, nil
	case openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED:
		if err := r.setLifecycle(sb, openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING, reasonStarting, msgStarting); err != nil {
			return nil, false, err
		}
	case openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING:
		// Retried: the timer that makes it READY is armed again.
	default:
		return nil, false, status.Errorf(codes.FailedPrecondition, "sandbox must be Stopped to start (current phase: %s)", phaseName(phase))
	}
	return proto.Clone(sb.pb).(*openshellv1.Sandbox), false, nil
}

// readyIfStarting makes a STARTING sandbox READY and reports whether it
// did.
func (r *registry) readyIfStarting(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.byID[id]
	if !ok || sb.pb.GetStatus().GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING {
		return false
	}
	prev := proto.Clone(sb.pb).(*openshellv1.Sandbox)
	sb.pb.Status.Phase = openshellv1.SandboxPhase_SANDBOX_PHASE_READY
	// The gateway reports no driver conditions for a READY sandbox; the
	// lifecycle's Ready=False one no longer holds.
	sb.pb.Status.Conditions = dropCondition(sb.pb.Status.Conditions, "Ready")
	sb.pb.Metadata.ResourceVersion++
	if err := r.save(sb); err != nil {
		sb.pb = prev
		return false
	}
	r.notify(sb)
	return true
}

// setLifecycle moves sb to phase with upstream's Ready=False condition,
// stores it and wakes watchers. On a store failure sb is as it was.
func (r *registry) setLifecycle(sb *sandbox, phase openshellv1.SandboxPhase, reason, msg string) error {
	prev := proto.Clone(sb.pb).(*openshellv1.Sandbox)
	st := sb.pb.Status
	st.Phase = phase
	if phase == openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPING || phase == openshellv1.SandboxPhase_SANDBOX_PHASE_STARTING {
		// The old exit status belongs to the process that is going away.
		st.ExitCode = nil
	}
	cond := &openshellv1.SandboxCondition{Type: "Ready", Status: "False", Reason: reason, Message: msg}
	st.Conditions = append(dropCondition(st.Conditions, "Ready"), cond)
	sb.pb.Metadata.ResourceVersion++
	if err := r.save(sb); err != nil {
		sb.pb = prev
		return status.Errorf(codes.Internal, "update sandbox lifecycle: %v", err)
	}
	r.notify(sb)
	return nil
}

func dropCondition(cs []*openshellv1.SandboxCondition, typ string) []*openshellv1.SandboxCondition {
	out := cs[:0:0]
	for _, c := range cs {
		if c.GetType() != typ {
			out = append(out, c)
		}
	}
	return out
}

// revokeSandbox deletes every SSH session token of sandbox id, as
// upstream deletes a stopped sandbox's SSH sessions: a restarted sandbox
// needs new ones.
func (r *sshRelay) revokeSandbox(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, g := range r.tokens {
		if g.sandboxID == id {
			delete(r.tokens, t)
		}
	}
}
