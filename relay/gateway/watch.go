package gateway

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
)

// WatchSandbox streams a sandbox as upstream's handle_watch_sandbox does
// (openshell-server grpc/sandbox.rs at v0.0.111):
//
//   - The sandbox comes first, whatever the flags; with stop_on_terminal
//     the stream ends there if it is READY, and READY is the only phase
//     that ends it.
//   - follow_logs then sends the log's tail (log_tail_lines, default 200,
//     filtered by log_since_ms, log_sources and log_min_level) and new
//     records as they come.
//   - follow_events would replay and follow platform events; the
//     embedded gateway has none, so it only follows the sandbox's end.
//   - follow_status sends the sandbox at every change of its record.
//
// The stream ends on its own only when something it follows ends: with
// follow_status, deleting the sandbox ends it cleanly after the DELETING
// record; followed logs or events without status end with CANCELLED
// "stream closed", as a closed broadcast channel ends upstream's. With no
// follow flag nothing ends it: it stays open after the first message
// until the client goes.
func (s *Server) WatchSandbox(req *openshellv1.WatchSandboxRequest, stream grpc.ServerStreamingServer[openshellv1.SandboxStreamEvent]) error {
	if req.GetId() == "" {
		return status.Error(codes.InvalidArgument, "id is required")
	}
	sb, ok := s.reg.lookup(req.GetId())
	if !ok {
		return status.Error(codes.NotFound, "sandbox not found")
	}
	ctx := stream.Context()
	sendSandbox := func(pb *openshellv1.Sandbox) error {
		return stream.Send(&openshellv1.SandboxStreamEvent{Payload: &openshellv1.SandboxStreamEvent_Sandbox{Sandbox: pb}})
	}
	live := logFilter{sources: req.GetLogSources(), minLevel: req.GetLogMinLevel()}
	sendLogs := func(lines []*openshellv1.SandboxLogLine, f logFilter) error {
		for _, l := range lines {
			if !f.match(l) {
				continue
			}
			if err := stream.Send(&openshellv1.SandboxStreamEvent{Payload: &openshellv1.SandboxStreamEvent_Log{Log: l}}); err != nil {
				return err
			}
		}
		return nil
	}

	// Subscribed before the first message, as upstream subscribes before
	// it reads the snapshot, so that no change falls between.
	var (
		pb            *openshellv1.Sandbox
		gone          bool
		statusChanged <-chan struct{}
	)
	if req.GetFollowStatus() {
		pb, gone, statusChanged = s.reg.snapshot(sb)
	} else {
		pb, gone = s.reg.current(sb)
	}
	var (
		tail       []*openshellv1.SandboxLogLine
		ring       *logRing
		next       uint64
		logChanged <-chan struct{}
	)
	if req.GetFollowLogs() || req.GetFollowEvents() {
		n := int(req.GetLogTailLines())
		if n == 0 {
			n = watchTailLines
		}
		tail, ring, next, logChanged = s.logs.tail(req.GetId(), n)
		gone = gone || ring == nil
	}
	if gone {
		return status.Error(codes.NotFound, "sandbox not found")
	}

	if err := sendSandbox(pb); err != nil {
		return err
	}
	if req.GetStopOnTerminal() && pb.GetStatus().GetPhase() == openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
		return nil
	}
	if req.GetFollowLogs() {
		first := live
		first.sinceMs = req.GetLogSinceMs()
		if err := sendLogs(tail, first); err != nil {
			return err
		}
	}
	for {
		select {
		case <-statusChanged:
			pb, gone, statusChanged = s.reg.snapshot(sb)
			if err := sendSandbox(pb); err != nil {
				return err
			}
			if gone || req.GetStopOnTerminal() && pb.GetStatus().GetPhase() == openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
				return nil
			}
		case <-logChanged:
			var lines []*openshellv1.SandboxLogLine
			var dropped bool
			lines, next, logChanged, dropped = s.logs.after(ring, next)
			if req.GetFollowLogs() {
				if err := sendLogs(lines, live); err != nil {
					return err
				}
			}
			if dropped {
				if req.GetFollowStatus() {
					// The sandbox is going: its record's change ends the
					// stream cleanly, whichever of the two is seen first.
					logChanged = nil
					continue
				}
				return status.Error(codes.Canceled, "stream closed")
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// current returns a copy of sb's record and whether it is gone. Unlike
// snapshot it registers no watch.
func (r *registry) current(sb *sandbox) (*openshellv1.Sandbox, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return proto.Clone(sb.pb).(*openshellv1.Sandbox), sb.gone
}
