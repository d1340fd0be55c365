package gateway_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/credentials/insecure"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
)

// pyBootstrap is _PYTHON_CLOUDPICKLE_BOOTSTRAP of upstream's Python SDK
// (OpenShell v0.0.111, python/openshell/sandbox.py): exec_python runs
// `python -c pyBootstrap` with the pickled callable in OPENSHELL_PYFUNC_B64.
const pyBootstrap = "import base64,cloudpickle,os;" +
	"payload=base64.b64decode(os.environ['OPENSHELL_PYFUNC_B64']);" +
	"func,args,kwargs=cloudpickle.loads(payload);" +
	"result=func(*args,**kwargs);" +
	"print(result) if result is not None else None"

// hostPython returns the directory of a python with cloudpickle, and the
// SDK's payload for (lambda a, b: a * b, (6, 7), {}) made by it, or ok
// false when there is no such python here.
func hostPython(t *testing.T) (dir, payload string, ok bool) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		return "", "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	// The SDK's _serialize_python_callable, then where the interpreter
	// really lives (python3 may be a pyenv shim that needs $HOME).
	out, err := exec.CommandContext(ctx, py, "-c", `import base64,cloudpickle,os,sys
print(os.path.dirname(os.path.realpath(sys.executable)))
print(base64.b64encode(cloudpickle.dumps((lambda a, b: a * b, (6, 7), {}))).decode("ascii"))`).Output()
	if err != nil {
		t.Logf("no python3 with cloudpickle (%v): checking only that exec_python's request is accepted", err)
		return "", "", false
	}
	dir, payload, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	if _, err := exec.LookPath(filepath.Join(dir, "python")); err != nil {
		t.Logf("no python next to %s: checking only that exec_python's request is accepted", dir)
		return "", "", false
	}
	return dir, payload, true
}

// TestSDKExecRequests sends ExecSandboxRequests built as upstream's Python
// SDK builds them, through plaintext and mTLS gateways and both exec RPCs:
// exec with a multi-line `sh -c` script, and exec_python.
func TestSDKExecRequests(t *testing.T) {
	pyDir, payload, havePy := hostPython(t)
	// Any valid base64 of the SDK's alphabet will do when nothing can
	// unpickle it; the request must still be accepted and run.
	if !havePy {
		payload = "gAWVAAAAAAAAAAA="
	}
	for _, tc := range []struct {
		name  string
		plain bool
	}{
		{"Plaintext", true},
		{"MTLS", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := gatewaytest.Start(t, gatewaytest.Options{Plaintext: tc.plain})
			var c openshellv1.OpenShellClient
			if tc.plain {
				c, _ = dial(t, g.Addr, insecure.NewCredentials())
			} else {
				c, _ = rawClient(t, g)
			}
			id := createReady(t, c, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "box"}).GetMetadata().GetId()
			for _, rpc := range execRPCs {
				t.Run(rpc.name+"/MultiLineScript", func(t *testing.T) {
					// SandboxClient.exec(id, ["sh", "-c", script]): the SDK
					// sets only sandbox_id and command (workdir, environment
					// and timeout when given).
					r := rpc.run(ctxFor(t), c, &openshellv1.ExecSandboxRequest{
						SandboxId: id,
						Command:   []string{"sh", "-c", "echo one\necho two\n"},
					})
					wantExit(t, r, 0)
					if got := r.stdout.String(); got != "one\ntwo\n" {
						t.Fatalf("stdout=%q, want %q", got, "one\ntwo\n")
					}
				})
				t.Run(rpc.name+"/ExecPython", func(t *testing.T) {
					// SandboxClient.exec_python(id, fn, args=(6, 7),
					// env={"PATH": ...}, timeout_seconds=20), as upstream's
					// e2e/python/test_sandbox_exec_python.py calls it: the
					// caller's env plus the payload.
					// PATH is the caller's because the login shell's
					// /etc/profile resets the gateway's.
					env := map[string]string{"OPENSHELL_PYFUNC_B64": payload}
					if havePy {
						env["PATH"] = pyDir + ":/usr/local/bin:/usr/bin:/bin"
					}
					r := rpc.run(ctxFor(t), c, &openshellv1.ExecSandboxRequest{
						SandboxId:      id,
						Command:        []string{"python", "-c", pyBootstrap},
						Environment:    env,
						TimeoutSeconds: 20,
					})
					if r.err != nil {
						t.Fatalf("exec_python's request refused: %v", r.err)
					}
					if !havePy {
						// python or cloudpickle missing in the sandbox: the
						// command ran and failed, as upstream's would.
						if !r.exited || r.code == 0 {
							t.Fatalf("want a failed run without python: %v", r)
						}
						return
					}
					wantExit(t, r, 0)
					if got := r.stdout.String(); got != "42\n" {
						t.Fatalf("stdout=%q, want %q (stderr %q)", got, "42\n", r.stderr.String())
					}
				})
			}
		})
	}
}
