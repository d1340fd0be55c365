package gateway_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/relaytest"
)

// The tests in this file and in hostile_test.go talk to the embedded
// gateway with nothing of ferry's client: only the committed generated
// proto and grpc with credentials built from the certificate files, as any
// OpenShell client (the upstream CLI, another SDK) would.

// rpcTimeout bounds every call and every wait in these tests.
const rpcTimeout = 20 * time.Second

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	t.Cleanup(cancel)
	return ctx
}

// tlsCreds reads an openshell mtls directory's files. An empty certFile
// leaves the client without a certificate.
func tlsCreds(t testing.TB, caFile, certFile, keyFile string) credentials.TransportCredentials {
	t.Helper()
	return credentials.NewTLS(tlsConfig(t, caFile, certFile, keyFile))
}

func tlsConfig(t testing.TB, caFile, certFile, keyFile string) *tls.Config {
	t.Helper()
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("%s: no PEM certificate", caFile)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// dial returns a raw client over its own connection, closed when t ends.
func dial(t testing.TB, addr string, creds credentials.TransportCredentials) (openshellv1.OpenShellClient, *grpc.ClientConn) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return openshellv1.NewOpenShellClient(cc), cc
}

// rawClient reaches g with the client certificate gatewaytest wrote.
func rawClient(t testing.TB, g *gatewaytest.Gateway) (openshellv1.OpenShellClient, *grpc.ClientConn) {
	t.Helper()
	d := filepath.Join(g.CertDir, gateway.ClientDir)
	return dial(t, g.Addr, tlsCreds(t, filepath.Join(d, "ca.crt"), filepath.Join(d, "tls.crt"), filepath.Join(d, "tls.key")))
}

// createReady creates a sandbox and watches it until it is READY.
func createReady(t testing.TB, c openshellv1.OpenShellClient, req *openshellv1.CreateSandboxRequest) *openshellv1.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	resp, err := c.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatalf("CreateSandbox %q: %v", req.GetName(), err)
	}
	id := resp.GetSandbox().GetMetadata().GetId()
	if id == "" {
		t.Fatalf("CreateSandbox %q: no id in %v", req.GetName(), resp)
	}
	w, err := c.WatchSandbox(ctx, &openshellv1.WatchSandboxRequest{Id: id, FollowStatus: true, StopOnTerminal: true})
	if err != nil {
		t.Fatalf("WatchSandbox: %v", err)
	}
	for range 100 {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("WatchSandbox %s: stream ended before READY: %v", id, err)
		}
		if sb := ev.GetSandbox(); sb.GetStatus().GetPhase() == openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
			return sb
		}
	}
	t.Fatalf("WatchSandbox %s: no READY in 100 events", id)
	return nil
}

// execResult is everything an exec stream delivered.
type execResult struct {
	stdout, stderr bytes.Buffer
	exited         bool
	code           int32
	afterExit      int // events received after the exit event
	err            error
	// headers: the server sent response headers (not a trailers-only
	// refusal). Set by execInteractive only.
	headers bool
}

func (r *execResult) String() string {
	return fmt.Sprintf("exited=%v code=%d err=%v stdout=%q stderr=%q", r.exited, r.code, r.err, clipOut(r.stdout.String()), clipOut(r.stderr.String()))
}

func clipOut(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// collect reads events until the stream ends. until, when set, is called
// after each stdout chunk; returning true stops reading there.
func collect(r *execResult, recv func() (*openshellv1.ExecSandboxEvent, error), until func(stdout string) bool) {
	for {
		ev, err := recv()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			r.err = err
			return
		}
		if r.exited {
			r.afterExit++
		}
		switch p := ev.GetPayload().(type) {
		case *openshellv1.ExecSandboxEvent_Stdout:
			r.stdout.Write(p.Stdout.GetData())
			if until != nil && until(r.stdout.String()) {
				return
			}
		case *openshellv1.ExecSandboxEvent_Stderr:
			r.stderr.Write(p.Stderr.GetData())
		case *openshellv1.ExecSandboxEvent_Exit:
			r.exited, r.code = true, p.Exit.GetExitCode()
		}
	}
}

func execOnce(ctx context.Context, c openshellv1.OpenShellClient, req *openshellv1.ExecSandboxRequest) *execResult {
	r := &execResult{}
	s, err := c.ExecSandbox(ctx, req)
	if err != nil {
		r.err = err
		return r
	}
	collect(r, s.Recv, nil)
	return r
}

// execInteractive sends start, then each stdin chunk, then half-closes,
// while it reads the output.
func execInteractive(ctx context.Context, c openshellv1.OpenShellClient, req *openshellv1.ExecSandboxRequest, stdin ...[]byte) *execResult {
	r := &execResult{}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.ExecSandboxInteractive(ctx)
	if err != nil {
		r.err = err
		return r
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		// A send error means the stream has ended; Recv has its status.
		if s.Send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Start{Start: req}}) != nil {
			return
		}
		for _, b := range stdin {
			if s.Send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Stdin{Stdin: b}}) != nil {
				return
			}
		}
		_ = s.CloseSend()
	})
	collect(r, s.Recv, nil)
	// The stream has ended, so Header does not block.
	md, err := s.Header()
	r.headers = err == nil && md != nil
	cancel()
	wg.Wait()
	return r
}

// execFunc runs one request through one of the two exec RPCs.
type execFunc func(ctx context.Context, c openshellv1.OpenShellClient, req *openshellv1.ExecSandboxRequest) *execResult

var execRPCs = []struct {
	name string
	run  execFunc
}{
	{"ExecSandbox", execOnce},
	{"ExecSandboxInteractive", func(ctx context.Context, c openshellv1.OpenShellClient, req *openshellv1.ExecSandboxRequest) *execResult {
		return execInteractive(ctx, c, req)
	}},
}

// wantExit fails t unless r is a clean stream that reported code.
func wantExit(t testing.TB, r *execResult, code int32) {
	t.Helper()
	if r.err != nil || !r.exited || r.code != code || r.afterExit != 0 {
		t.Fatalf("want exit %d and a clean end, got %v (events after exit: %d)", code, r, r.afterExit)
	}
}

// wantStatus fails t unless err is a status with code whose message holds
// msg.
func wantStatus(t testing.TB, err error, code codes.Code, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want %v %q, got success", code, msg)
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != code || !strings.Contains(st.Message(), msg) {
		t.Fatalf("want %v with %q in the message, got %v", code, msg, err)
	}
}

// newMarker returns a value for FERRY_MARKER. Whatever still carries it
// when t ends is killed, so that a failing test leaves nothing running (the
// test has already failed by then if that matters to it).
func newMarker(t testing.TB) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	marker := hex.EncodeToString(b)
	t.Cleanup(func() {
		for _, pid := range relaytest.Marked(marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return marker
}

// TestRawClientLifecycle drives every RPC ferry relies on through a plain
// grpc client with the files of an openshell mtls directory.
func TestRawClientLifecycle(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c, _ := rawClient(t, g)
	ctx := ctxFor(t)

	h, err := c.Health(ctx, &openshellv1.HealthRequest{})
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	if h.GetStatus() != openshellv1.ServiceStatus_SERVICE_STATUS_HEALTHY || h.GetVersion() == "" {
		t.Fatalf("Health = %v, want HEALTHY with a version", h)
	}

	sb := createReady(t, c, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "raw", Labels: map[string]string{"team": "ferry"}})
	id := sb.GetMetadata().GetId()
	if sb.GetMetadata().GetName() != "raw" || sb.GetMetadata().GetWorkspace() != "default" {
		t.Fatalf("watched sandbox metadata = %v, want name raw in workspace default", sb.GetMetadata())
	}

	got, err := c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "raw"})
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if got.GetSandbox().GetMetadata().GetId() != id ||
		got.GetSandbox().GetStatus().GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_READY ||
		got.GetSandbox().GetMetadata().GetLabels()["team"] != "ferry" {
		t.Fatalf("GetSandbox = %v, want id %s, READY, label team=ferry", got.GetSandbox(), id)
	}

	list, err := c.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{})
	if err != nil {
		t.Fatalf("ListSandboxes: %v", err)
	}
	if n := len(list.GetSandboxes()); n != 1 || list.GetSandboxes()[0].GetMetadata().GetId() != id {
		t.Fatalf("ListSandboxes = %v, want exactly sandbox %s", list.GetSandboxes(), id)
	}

	r := execOnce(ctx, c, &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"echo", "hi"}})
	wantExit(t, r, 0)
	if r.stdout.String() != "hi\n" || r.stderr.Len() != 0 {
		t.Fatalf("echo hi: %v", r)
	}

	r = execOnce(ctx, c, &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
	wantExit(t, r, 3)
	if r.stdout.String() != "out\n" || r.stderr.String() != "err\n" {
		t.Fatalf("exit 3: %v", r)
	}

	// Interactive: binary stdin in chunks, one of them larger than a
	// flow-control window, must come back byte for byte.
	var chunks [][]byte
	var want []byte
	for i, n := range []int{1, 4096, 512 << 10, 3} {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i*7 + j)
		}
		chunks = append(chunks, b)
		want = append(want, b...)
	}
	r = execInteractive(ctx, c, &openshellv1.ExecSandboxRequest{SandboxId: id, Command: []string{"sh", "-c", "cat; echo done >&2; exit 5"}}, chunks...)
	wantExit(t, r, 5)
	if !r.headers {
		t.Fatal("an accepted interactive exec sent no response headers")
	}
	if !bytes.Equal(r.stdout.Bytes(), want) || r.stderr.String() != "done\n" {
		t.Fatalf("interactive cat: got %d bytes of stdout (equal: %v), stderr %q; want %d bytes", r.stdout.Len(), bytes.Equal(r.stdout.Bytes(), want), r.stderr.String(), len(want))
	}

	del, err := c.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: "raw"})
	if err != nil || !del.GetDeleted() {
		t.Fatalf("DeleteSandbox = %v, %v; want deleted", del, err)
	}
	_, err = c.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "raw"})
	wantStatus(t, err, codes.NotFound, "sandbox not found")
	if _, err := os.Stat(filepath.Join(g.Root, "raw")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("sandbox dir after delete: %v, want it gone", err)
	}
}

// TestMTLSRefusesStrangers checks that the gateway talks only to clients
// holding a certificate from its own CA.
func TestMTLSRefusesStrangers(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	good, _ := rawClient(t, g)
	clientDir := filepath.Join(g.CertDir, gateway.ClientDir)
	caFile := filepath.Join(clientDir, "ca.crt")

	other := filepath.Join(t.TempDir(), "other")
	if err := gateway.WriteCerts(other, nil); err != nil {
		t.Fatal(err)
	}
	otherClient := filepath.Join(other, gateway.ClientDir)

	// The control: gatewaytest's own client certificate gets an answer.
	goodCfg := tlsConfig(t, caFile, filepath.Join(clientDir, "tls.crt"), filepath.Join(clientDir, "tls.key"))
	goodCfg.NextProtos = []string{"h2"}
	if err := tlsAlert(t, g.Addr, goodCfg); err != nil {
		t.Fatalf("TLS with the gateway's own client certificate: %v", err)
	}

	for _, tc := range []struct {
		name  string
		tls   func(t *testing.T) *tls.Config // nil: plaintext
		alert string                         // the server's TLS alert
	}{
		{"NoClientCert", func(t *testing.T) *tls.Config {
			return tlsConfig(t, caFile, "", "")
		}, "certificate required"},
		{"ClientCertFromOtherCA", func(t *testing.T) *tls.Config {
			// The server is trusted; only the client's certificate is foreign.
			return tlsConfig(t, caFile, filepath.Join(otherClient, "tls.crt"), filepath.Join(otherClient, "tls.key"))
		}, "unknown certificate authority"},
		{"Plaintext", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			creds := insecure.NewCredentials()
			if tc.tls != nil {
				creds = credentials.NewTLS(tc.tls(t))
			}
			c, _ := dial(t, g.Addr, creds)
			ctx := ctxFor(t)
			_, err := c.CreateSandbox(ctx, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "intruder"})
			// The handshake fails on the connection, so grpc reports
			// UNAVAILABLE with whatever the transport saw first (the alert,
			// a broken pipe, EOF): only the code is stable.
			wantStatus(t, err, codes.Unavailable, "")
			_, err = c.Health(ctx, &openshellv1.HealthRequest{})
			wantStatus(t, err, codes.Unavailable, "")

			if tc.tls != nil {
				// Below grpc the refusal is the server's TLS alert.
				cfg := tc.tls(t)
				cfg.NextProtos = []string{"h2"}
				err := tlsAlert(t, g.Addr, cfg)
				if err == nil || !strings.Contains(err.Error(), tc.alert) {
					t.Fatalf("TLS with this client: %v, want the server's %q alert", err, tc.alert)
				}
			}

			_, err = good.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "intruder"})
			wantStatus(t, err, codes.NotFound, "sandbox not found")
			if _, err := os.Stat(filepath.Join(g.Root, "intruder")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("sandbox dir of a refused client: %v, want none", err)
			}
		})
	}
	list, err := good.ListSandboxes(ctxFor(t), &openshellv1.ListSandboxesRequest{AllWorkspaces: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetSandboxes()); n != 0 {
		t.Fatalf("refused clients created %d sandboxes: %v", n, list.GetSandboxes())
	}
}

// tlsAlert handshakes with addr and reads until the server speaks or
// hangs up; in TLS 1.3 a refused client certificate shows up there, as the
// server's alert.
func tlsAlert(t testing.TB, addr string, cfg *tls.Config) error {
	t.Helper()
	d := &net.Dialer{Timeout: rpcTimeout}
	conn, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(rpcTimeout)); err != nil {
		t.Fatal(err)
	}
	// The HTTP/2 client preface, so that a server which accepted us would
	// answer with its SETTINGS rather than wait.
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	return err
}
