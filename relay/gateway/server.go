package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
)

// Config configures a Server. Zero values take the defaults in New.
type Config struct {
	// Root holds one directory per sandbox (Root/<name> in the default
	// workspace, Root/.ws/<workspace>/<name> in others) and, in
	// Root/.gateway, the gateway's records.
	Root string
	// Shell runs each exec's command string. Default ["/bin/bash", "-lc"],
	// as the real gateway's sandbox SSH server does.
	Shell []string
	// Path is the PATH a sandbox process starts with.
	// Default "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".
	Path string
	// ReadyDelay is how long a new sandbox stays PROVISIONING before it is
	// READY, so that clients exercise their wait. Default 50ms.
	ReadyDelay time.Duration
	// Version is reported by Health and GetGatewayInfo.
	Version string
	// Logger receives one line per RPC outcome worth knowing. Default
	// slog.Default(). Command arguments and environments are never logged
	// here; the sandbox log that GetSandboxLogs serves (logs.go) records
	// each exec's argv and environment keys, never values or stdin.
	Logger *slog.Logger

	// CutAfter is a fault-injection hook for tests: when positive, every
	// exec stream is cut, as a dropped relay would be, once that many bytes
	// of stdin and output together have crossed it; the RPC then fails
	// with UNAVAILABLE and the process is killed. An SSH session (exec over
	// ForwardTcp) counts the same bytes, and its cut ends the whole relay
	// and every process on it.
	CutAfter int64
	// CorruptStdinAfter and CorruptStdoutAfter are fault-injection hooks
	// for tests: when positive, the byte that follows the first n bytes of
	// every exec's (and every SSH session's) stdin (or stdout) is flipped,
	// as a faulty relay would, and the stream goes on.
	CorruptStdinAfter, CorruptStdoutAfter int64
	// DisableInteractive makes ExecSandboxInteractive answer UNIMPLEMENTED,
	// as an older gateway would, so that clients' fallback can be tested.
	DisableInteractive bool

	// EnvOnlyProcs makes the gateway find a sandbox's processes by their
	// FERRY_SANDBOX_ID variable alone, as it does where no cgroup v2
	// hierarchy is writable (procs_linux.go), so that tests can reach
	// that fallback.
	EnvOnlyProcs bool

	// SSHSessionTTL is how long a CreateSshSession token stays valid.
	// Default 86400s, as upstream's.
	SSHSessionTTL time.Duration
}

// Server implements openshell.v1.OpenShell.
type Server struct {
	openshellv1.UnimplementedOpenShellServer
	cfg   Config
	reg   *registry
	logs  *logBook
	user  string
	procs *sandboxProcs

	mu     sync.Mutex
	timers map[string]*time.Timer
	closed bool

	ssh  sshRelay   // CreateSshSession tokens and ForwardTcp's SSH server
	life sync.Mutex // held by StopSandbox and StartSandbox (lifecycle.go)
}

var _ openshellv1.OpenShellServer = (*Server)(nil)

// New opens (or creates) the gateway state under cfg.Root.
func New(cfg Config) (*Server, error) {
	if cfg.Root == "" {
		return nil, errors.New("gateway: Root is required")
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("resolve root: %w", err)
	}
	cfg.Root = root
	if len(cfg.Shell) == 0 {
		cfg.Shell = []string{"/bin/bash", "-lc"}
	}
	if cfg.Path == "" {
		cfg.Path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	if cfg.ReadyDelay == 0 {
		cfg.ReadyDelay = 50 * time.Millisecond
	}
	if cfg.Version == "" {
		cfg.Version = "ferry-embedded"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SSHSessionTTL == 0 {
		cfg.SSHSessionTTL = defaultSSHSessionTTL
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("create root: %w", err)
	}
	reg, err := newRegistry(root)
	if err != nil {
		return nil, err
	}
	name := "sandbox"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	logs, err := newLogBook(filepath.Join(reg.metaDir(), "logs"), cfg.Logger, func(id string) bool {
		_, ok := reg.lookup(id)
		return ok
	})
	if err != nil {
		return nil, err
	}
	logs.prune()
	procs := newSandboxProcs(cfg.EnvOnlyProcs, cfg.Logger)
	s := &Server{cfg: cfg, reg: reg, logs: logs, user: name, procs: procs, timers: map[string]*time.Timer{}}
	// A sandbox left PROVISIONING by a previous run is ready now.
	for _, sb := range reg.list("", true, nil) {
		if sb.GetStatus().GetPhase() == openshellv1.SandboxPhase_SANDBOX_PHASE_PROVISIONING {
			s.logEvent(sb.GetMetadata().GetId(), "sandbox ready", nil)
			reg.setPhase(sb.GetMetadata().GetId(), openshellv1.SandboxPhase_SANDBOX_PHASE_READY)
		}
	}
	s.recoverLifecycle()
	return s, nil
}

// Register adds the service to g.
func (s *Server) Register(g *grpc.Server) {
	g.RegisterService(withTonicLimits(&openshellv1.OpenShell_ServiceDesc), s)
}

// ServerOptions are the options a grpc.Server needs to behave like the
// real gateway (its 1 MiB inbound message limit) and to receive stdin as
// exec expects it (execcodec's payloads, which exec releases). They go
// with Register: the codec leaves an oversized message undecoded for the
// handlers Register wraps to refuse.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(limitCodec{}),
		grpc.MaxRecvMsgSize(decodeBuffer),
		grpc.InitialWindowSize(windowSize),
		grpc.InitialConnWindowSize(windowSize),
		grpc.WriteBufferSize(ioBuffer),
		grpc.ReadBufferSize(ioBuffer),
	}
}

const (
	maxMessage = 1 << 20
	// A window that covers a few output chunks keeps a fast exec stream
	// from stalling on flow-control round trips.
	windowSize = 4 << 20
	// Transport buffers of this size turn a bulk stream into few large
	// TLS records and syscalls instead of one per 32 KiB.
	ioBuffer = 256 << 10
)

// Close stops pending state changes. Running execs end with their RPCs;
// what a sandbox detached keeps running, as a real sandbox's processes
// outlive a restart of upstream's gateway, until the sandbox is stopped
// or deleted.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for id, t := range s.timers {
		t.Stop()
		delete(s.timers, id)
	}
	s.mu.Unlock()
	for _, pb := range s.reg.list("", true, nil) {
		s.procs.release(pb.GetMetadata().GetId())
	}
}

// EndProcesses ends every process of every sandbox, as taking the
// machine down would. An exec's processes outlive the exec, as
// upstream's do; a test calls this when it is done with its gateway, so
// that none outlives the test.
func (s *Server) EndProcesses() {
	for _, pb := range s.reg.list("", true, nil) {
		s.endProcs(pb.GetMetadata().GetId())
	}
}

// endProcs ends every process sandbox id started, after its execs have
// ended. Neither a stop nor a delete fails for one that would not die:
// the sandbox's state has already changed, so the survivors are logged.
func (s *Server) endProcs(id string) {
	if err := s.procs.end(id, procsStopTimeout); err != nil {
		s.cfg.Logger.Warn("sandbox processes survived", "id", id, "err", err)
	}
}

func (s *Server) Health(context.Context, *openshellv1.HealthRequest) (*openshellv1.HealthResponse, error) {
	return &openshellv1.HealthResponse{Status: openshellv1.ServiceStatus_SERVICE_STATUS_HEALTHY, Version: s.cfg.Version}, nil
}

func (s *Server) GetGatewayInfo(context.Context, *openshellv1.GetGatewayInfoRequest) (*openshellv1.GetGatewayInfoResponse, error) {
	return &openshellv1.GetGatewayInfoResponse{
		Status:         openshellv1.ServiceStatus_SERVICE_STATUS_HEALTHY,
		GatewayVersion: s.cfg.Version,
		ComputeDrivers: []*openshellv1.ComputeDriverInfo{{Name: "ferry-local", Capabilities: &openshellv1.ComputeDriverCapabilities{DriverName: "ferry-local", DriverVersion: s.cfg.Version}}},
	}, nil
}

func (s *Server) CreateSandbox(ctx context.Context, req *openshellv1.CreateSandboxRequest) (*openshellv1.SandboxResponse, error) {
	if req.GetSpec() == nil {
		return nil, status.Error(codes.InvalidArgument, "spec is required")
	}
	sb, err := s.reg.create(req)
	switch {
	case errors.Is(err, errExists):
		return nil, status.Errorf(codes.AlreadyExists, "sandbox %q already exists", req.GetName())
	case err != nil && status.Code(err) != codes.Unknown:
		// The workspace's refusal, with its own code.
		return nil, err
	case err != nil:
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	id := sb.GetMetadata().GetId()
	s.logEvent(id, "sandbox created", createdFields(sb))
	s.mu.Lock()
	if !s.closed {
		s.timers[id] = time.AfterFunc(s.cfg.ReadyDelay, func() {
			s.mu.Lock()
			delete(s.timers, id)
			s.mu.Unlock()
			// The record first: whoever sees the sandbox READY finds it
			// in the log.
			s.logEvent(id, "sandbox ready", nil)
			s.reg.setPhase(id, openshellv1.SandboxPhase_SANDBOX_PHASE_READY)
		})
	}
	s.mu.Unlock()
	s.cfg.Logger.Info("sandbox created", "name", sb.GetMetadata().GetName(), "id", id)
	return &openshellv1.SandboxResponse{Sandbox: sb}, nil
}

func (s *Server) GetSandbox(ctx context.Context, req *openshellv1.GetSandboxRequest) (*openshellv1.SandboxResponse, error) {
	if err := s.reg.named(req.GetWorkspace(), req.GetName()); err != nil {
		return nil, err
	}
	sb, ok := s.reg.get(req.GetWorkspace(), req.GetName())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "sandbox not found")
	}
	return &openshellv1.SandboxResponse{Sandbox: sb}, nil
}

func (s *Server) ListSandboxes(ctx context.Context, req *openshellv1.ListSandboxesRequest) (*openshellv1.ListSandboxesResponse, error) {
	if req.GetAllWorkspaces() && req.GetWorkspace() != "" {
		return nil, status.Error(codes.InvalidArgument, "all_workspaces and workspace are mutually exclusive")
	}
	if !req.GetAllWorkspaces() {
		if _, err := s.reg.resolveWorkspace(req.GetWorkspace()); err != nil {
			return nil, err
		}
	}
	want, err := parseSelector(req.GetLabelSelector())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// Filtered before the page is cut, as upstream does.
	all := s.reg.list(req.GetWorkspace(), req.GetAllWorkspaces(), want)
	return &openshellv1.ListSandboxesResponse{Sandboxes: page(all, req.GetOffset(), req.GetLimit())}, nil
}

func (s *Server) DeleteSandbox(ctx context.Context, req *openshellv1.DeleteSandboxRequest) (*openshellv1.DeleteSandboxResponse, error) {
	if err := s.reg.named(req.GetWorkspace(), req.GetName()); err != nil {
		return nil, err
	}
	sb, ok := s.reg.get(req.GetWorkspace(), req.GetName())
	if ok {
		s.mu.Lock()
		if t, ok := s.timers[sb.GetMetadata().GetId()]; ok {
			t.Stop()
			delete(s.timers, sb.GetMetadata().GetId())
		}
		s.mu.Unlock()
		s.logEvent(sb.GetMetadata().GetId(), "sandbox deleting", map[string]string{"name": req.GetName()})
	}
	found, err := s.reg.remove(req.GetWorkspace(), req.GetName(), s.endProcs)
	if !found {
		return nil, status.Errorf(codes.NotFound, "sandbox not found")
	}
	if ok {
		s.logs.drop(sb.GetMetadata().GetId())
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	s.cfg.Logger.Info("sandbox deleted", "name", req.GetName())
	return &openshellv1.DeleteSandboxResponse{Deleted: true}, nil
}
