package gateway_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
)

// TestOversizedMessages checks upstream's 1 MiB inbound limit as a client
// meets it: tonic's OUT_OF_RANGE for a unary or server-streaming request,
// INTERNAL for an interactive start (upstream wraps its first read's
// error), and the end of stdin for a later interactive chunk, after
// which the command goes on and the RPC ends as it does.
func TestOversizedMessages(t *testing.T) {
	b := newBox(t, gatewaytest.Options{}, "box")
	const tooLarge = "Error, decoded message length too large: found "
	for _, tc := range []struct {
		name   string
		run    func(t *testing.T) *execResult
		code   codes.Code
		msg    string
		stdout string // for codes.OK: what the command printed before its exit 0
	}{
		{"CreateSandboxAnnotation", func(t *testing.T) *execResult {
			_, err := b.c.CreateSandbox(ctxFor(t), &openshellv1.CreateSandboxRequest{
				Spec: &openshellv1.SandboxSpec{}, Name: "big", Annotations: map[string]string{"a": strings.Repeat("x", 2<<20)},
			})
			return &execResult{err: err}
		}, codes.OutOfRange, tooLarge, ""},
		{"ExecSandboxStdin", func(t *testing.T) *execResult {
			return execOnce(ctxFor(t), b.c, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"cat"}, Stdin: make([]byte, 1<<20+1)})
		}, codes.OutOfRange, "bytes, the limit is: 1048576 bytes", ""},
		{"ExecSandboxUnderLimit", func(t *testing.T) *execResult {
			return execOnce(ctxFor(t), b.c, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"sh", "-c", "wc -c"}, Stdin: make([]byte, 1<<20-128)})
		}, codes.OK, "", "1048448\n"},
		{"InteractiveStart", func(t *testing.T) *execResult {
			return execInteractive(ctxFor(t), b.c, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"cat"}, Stdin: make([]byte, 1<<20+1)})
		}, codes.Internal, "failed to read first message: " + "rpc error: code = OutOfRange desc = " + tooLarge, ""},
		{"InteractiveChunk", func(t *testing.T) *execResult {
			return execInteractive(ctxFor(t), b.c, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"sh", "-c", "cat; echo done"}},
				[]byte("abc"), make([]byte, 1<<20+1), []byte("lost"))
		}, codes.OK, "", "abcdone\n"},
		// Past grpc-go's own buffer the refusal is grpc-go's.
		{"PastDecodeBuffer", func(t *testing.T) *execResult {
			return execOnce(ctxFor(t), b.c, &openshellv1.ExecSandboxRequest{SandboxId: b.id, Command: []string{"cat"}, Stdin: make([]byte, 5<<20)})
		}, codes.ResourceExhausted, "grpc: received message larger than max", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.run(t)
			if tc.code == codes.OK {
				wantExit(t, r, 0)
				if got := r.stdout.String(); got != tc.stdout {
					t.Fatalf("stdout %q, want %q", got, tc.stdout)
				}
				return
			}
			wantStatus(t, r.err, tc.code, tc.msg)
			if r.exited || r.stdout.Len() > 0 {
				t.Fatalf("an oversized request ran: %v", r)
			}
			wantNoHeaders(t, r)
		})
	}
	// The refused create left nothing.
	if _, err := b.c.GetSandbox(ctxFor(t), &openshellv1.GetSandboxRequest{Name: "big"}); err == nil {
		t.Fatal("the oversized CreateSandbox made a sandbox")
	}
}
