package gateway

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/internal/tcpframe"
)

// Limits of upstream's SSH relay.
const (
	defaultSSHSessionTTL = 86400 * time.Second
	// maxConnsPerToken and maxConnsPerSandbox bound concurrent ForwardTcp
	// streams; past them ForwardTcp answers RESOURCE_EXHAUSTED.
	maxConnsPerToken   = 3
	maxConnsPerSandbox = 20
	// sshServicePrefix + sandbox id is the service_id ferry's client names
	// in an SSH relay's init frame, and the relay's address in logs.
	// Upstream passes service_id on and checks nothing of it, so neither
	// does the gateway.
	sshServicePrefix = "ssh-proxy:"
)

// sshRelay is the gateway's SSH relay state: the session tokens, the
// connections open per token and per sandbox, and the SSH server behind
// ForwardTcp. Its zero value is ready.
type sshRelay struct {
	mu        sync.Mutex
	tokens    map[string]*sshToken
	perBox    map[string]int // sandbox id -> open connections
	keyOnce   sync.Once
	serverCfg *ssh.ServerConfig
	keyErr    error
}

// sshToken is one CreateSshSession grant. Revoking deletes it.
type sshToken struct {
	sandboxID string
	expires   time.Time
	open      int // connections using it now
}

// config returns the SSH server configuration, made on first use with a
// fresh Ed25519 host key: like the sandbox supervisor's, the key is new at
// every start, so no client can pin it (upstream leaves
// host_key_fingerprint empty for that reason).
func (r *sshRelay) config() (*ssh.ServerConfig, error) {
	r.keyOnce.Do(func() {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			r.keyErr = err
			return
		}
		signer, err := ssh.NewSignerFromKey(priv)
		if err != nil {
			r.keyErr = err
			return
		}
		// Auth "none" for any user, as the supervisor: the ForwardTcp
		// token is the credential, checked before a byte of SSH flows.
		cfg := &ssh.ServerConfig{NoClientAuth: true, ServerVersion: "SSH-2.0-ferry-embedded"}
		cfg.AddHostKey(signer)
		r.serverCfg = cfg
	})
	return r.serverCfg, r.keyErr
}

func (s *Server) CreateSshSession(ctx context.Context, req *openshellv1.CreateSshSessionRequest) (*openshellv1.CreateSshSessionResponse, error) {
	id := req.GetSandboxId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "sandbox_id is required")
	}
	if _, err := s.readySandbox(id); err != nil {
		return nil, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, status.Errorf(codes.Internal, "make token: %v", err)
	}
	token := base64.RawURLEncoding.EncodeToString(b[:])
	now := time.Now()
	expires := now.Add(s.cfg.SSHSessionTTL)
	r := &s.ssh
	r.mu.Lock()
	if r.tokens == nil {
		r.tokens = map[string]*sshToken{}
	}
	// Expired grants are dropped here so that the map stays as small as
	// the live ones.
	for t, g := range r.tokens {
		if !now.Before(g.expires) && g.open == 0 {
			delete(r.tokens, t)
		}
	}
	r.tokens[token] = &sshToken{sandboxID: id, expires: expires}
	r.mu.Unlock()
	host, port, scheme := gatewayAddr(ctx)
	s.cfg.Logger.Info("ssh session created", "sandbox_id", id)
	return &openshellv1.CreateSshSessionResponse{
		SandboxId:     id,
		Token:         token,
		GatewayHost:   host,
		GatewayPort:   port,
		GatewayScheme: scheme,
		ExpiresAtMs:   expires.UnixMilli(),
	}, nil
}

// gatewayAddr is how the client reached this gateway: the request's
// authority (the port, when it names none, from the connection), and
// whether it came over TLS.
func gatewayAddr(ctx context.Context) (host string, port uint32, scheme string) {
	scheme = "http"
	p, _ := peer.FromContext(ctx)
	if p != nil && p.AuthInfo != nil {
		if _, tls := p.AuthInfo.(credentials.TLSInfo); tls {
			scheme = "https"
		}
	}
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(":authority")) > 0 {
		host = md.Get(":authority")[0]
		if h, ps, err := net.SplitHostPort(host); err == nil {
			n, _ := strconv.ParseUint(ps, 10, 16)
			return h, uint32(n), scheme
		}
	}
	if p != nil && p.LocalAddr != nil {
		if h, ps, err := net.SplitHostPort(p.LocalAddr.String()); err == nil {
			n, _ := strconv.ParseUint(ps, 10, 16)
			if host == "" {
				host = h
			}
			port = uint32(n)
		}
	}
	return host, port, scheme
}

func (s *Server) RevokeSshSession(ctx context.Context, req *openshellv1.RevokeSshSessionRequest) (*openshellv1.RevokeSshSessionResponse, error) {
	r := &s.ssh
	r.mu.Lock()
	tok, ok := r.tokens[req.GetToken()]
	delete(r.tokens, req.GetToken())
	r.mu.Unlock()
	if ok {
		s.cfg.Logger.Info("ssh session revoked", "sandbox_id", tok.sandboxID)
	}
	return &openshellv1.RevokeSshSessionResponse{Revoked: ok}, nil
}

// readySandbox is the sandbox with object id id, if it is READY.
func (s *Server) readySandbox(id string) (admitted, error) {
	sb, ok := s.reg.lookup(id)
	if !ok {
		return admitted{}, status.Error(codes.NotFound, "sandbox not found")
	}
	pb := s.reg.record(sb)
	if pb.GetStatus().GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
		return admitted{}, status.Error(codes.FailedPrecondition, "sandbox is not ready")
	}
	return admitted{sb: sb, pb: pb}, nil
}

// admitForward checks a ForwardTcp init frame, its sandbox, its token and
// the connection limits, in that order, and counts the connection; release
// uncounts it. A revoked or expired token admits no new connection; the
// connections it already admitted run on.
func (s *Server) admitForward(init *openshellv1.TcpForwardInit) (a admitted, release func(), err error) {
	id := init.GetSandboxId()
	switch {
	case id == "":
		return admitted{}, nil, status.Error(codes.InvalidArgument, "sandbox_id is required")
	case init.GetTcp() != nil:
		return admitted{}, nil, status.Error(codes.Unimplemented, "tcp relay targets are not supported by the embedded gateway")
	case init.GetSsh() == nil:
		return admitted{}, nil, status.Error(codes.InvalidArgument, "tcp forward target is required")
	}
	if a, err = s.readySandbox(id); err != nil {
		return admitted{}, nil, err
	}
	r := &s.ssh
	r.mu.Lock()
	defer r.mu.Unlock()
	tok, ok := r.tokens[init.GetAuthorizationToken()]
	switch {
	case init.GetAuthorizationToken() == "":
		return admitted{}, nil, status.Error(codes.Unauthenticated, "authorization token is required")
	case !ok:
		return admitted{}, nil, status.Error(codes.Unauthenticated, "invalid or revoked ssh session token")
	case !time.Now().Before(tok.expires):
		return admitted{}, nil, status.Error(codes.Unauthenticated, "ssh session token expired")
	case tok.sandboxID != id:
		return admitted{}, nil, status.Error(codes.PermissionDenied, "ssh session token is for another sandbox")
	case tok.open >= maxConnsPerToken:
		return admitted{}, nil, status.Errorf(codes.ResourceExhausted, "at most %d concurrent connections per ssh session token", maxConnsPerToken)
	case r.perBox[id] >= maxConnsPerSandbox:
		return admitted{}, nil, status.Errorf(codes.ResourceExhausted, "at most %d concurrent ssh connections per sandbox", maxConnsPerSandbox)
	}
	if r.perBox == nil {
		r.perBox = map[string]int{}
	}
	tok.open++
	r.perBox[id]++
	return a, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		tok.open--
		if r.perBox[id]--; r.perBox[id] == 0 {
			delete(r.perBox, id)
		}
	}, nil
}

// ForwardTcp relays one SSH connection to the sandbox named by the first
// frame: an init with service_id "ssh-proxy:<id>", an ssh target and a
// token from CreateSshSession. Everything after it is data frames of at
// most 64 KiB either way. The RPC ends when the SSH connection does, and
// every process the connection started is killed with it.
func (s *Server) ForwardTcp(stream grpc.BidiStreamingServer[openshellv1.TcpForwardFrame, openshellv1.TcpForwardFrame]) error {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return status.Error(codes.InvalidArgument, "first frame must be init")
	}
	if err != nil {
		return err
	}
	init := first.GetInit()
	if init == nil {
		return status.Error(codes.InvalidArgument, "first frame must be init")
	}
	a, release, err := s.admitForward(init)
	if err != nil {
		return err
	}
	defer release()
	cfg, err := s.ssh.config()
	if err != nil {
		return status.Errorf(codes.Internal, "make ssh host key: %v", err)
	}
	// As with exec, a refusal comes before the headers; headers mean the
	// relay is open.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	return s.serveSSH(stream, cfg, a)
}

// serveSSH runs the SSH server over stream until the connection ends, then
// waits for everything it started.
func (s *Server) serveSSH(stream grpc.BidiStreamingServer[openshellv1.TcpForwardFrame, openshellv1.TcpForwardFrame], cfg *ssh.ServerConfig, a admitted) error {
	start := time.Now()
	id := a.pb.GetMetadata().GetId()
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	untrack, err := s.reg.track(id, cancel)
	if err != nil {
		return err
	}
	defer untrack()

	remote := "client"
	if p, ok := peer.FromContext(stream.Context()); ok {
		remote = p.Addr.String()
	}
	fc := tcpframe.New(stream, tcpframe.Addr(sshServicePrefix+id), tcpframe.Addr(remote), nil)
	defer fc.Close()
	// Closing the conn ends x/crypto's reader, and with it every channel.
	stop := context.AfterFunc(ctx, func() { fc.Close() })
	defer stop()

	log := s.cfg.Logger.With("sandbox", a.pb.GetMetadata().GetName())
	sc, chans, reqs, err := ssh.NewServerConn(fc, cfg)
	if err == nil {
		log.Debug("ssh connection open", "user", sc.User())
		var wg sync.WaitGroup
		wg.Go(func() { ssh.DiscardRequests(reqs) })
		for nch := range chans {
			switch nch.ChannelType() {
			case "session":
				wg.Go(func() { s.sshSession(ctx, cancel, nch, a) })
			case "direct-tcpip":
				wg.Go(func() { s.directTCPIP(ctx, nch) })
			default:
				_ = nch.Reject(ssh.UnknownChannelType, "unsupported channel type")
			}
		}
		// chans is closed: the connection has ended. What it started ends
		// with it.
		sc.Close()
		cancel(errConnEnded)
		wg.Wait()
	}
	fc.Close()
	log = log.With("seconds", time.Since(start).Seconds())
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errCut):
		log.Info("ssh relay cut by fault hook")
		return errRelayClosed
	case errors.Is(cause, errDeleted):
		log.Info("ssh relay stopped: sandbox deleted")
		return errRelayClosed
	case errors.Is(cause, errStopped):
		log.Info("ssh relay stopped: sandbox stopped")
		return errRelayClosed
	case stream.Context().Err() != nil:
		log.Debug("ssh relay stopped: client gone")
		return status.FromContextError(stream.Context().Err()).Err()
	}
	if rerr := fc.Err(); errors.Is(rerr, tcpframe.ErrFrameTooLarge) || errors.Is(rerr, tcpframe.ErrUnexpectedInit) {
		return status.Error(codes.InvalidArgument, rerr.Error())
	}
	if err != nil {
		log.Info("ssh handshake failed", "err", err)
		return status.Errorf(codes.Aborted, "ssh handshake: %v", err)
	}
	log.Debug("ssh connection closed")
	return nil
}

// errConnEnded is why a connection's context ends once the client has
// closed it.
var errConnEnded = errors.New("gateway: ssh connection ended")
