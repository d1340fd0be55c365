package openshell_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/internal/execcodec"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/relaytest"
)

func TestMain(m *testing.M) {
	// Exec's output payloads are poisoned on release and checked for a
	// second one: a release before the last read shows as wrong bytes.
	execcodec.Debug(true)
	goleak.VerifyTestMain(m)
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// sshVia returns an SSH execer over c, closed when t ends.
func sshVia(t *testing.T, c *openshell.Client) *openshell.SSH {
	x := c.SSH(openshell.SSHConfig{})
	t.Cleanup(func() { x.Close() })
	return x
}

// echo runs `echo word` in box through x.
func echo(t *testing.T, x relay.Execer, box, word string) error {
	t.Helper()
	var out bytes.Buffer
	code, err := x.Exec(ctxFor(t), &relay.Command{Sandbox: box, Argv: []string{"echo", word}, Stdout: &out})
	if err == nil && (code != 0 || out.String() != word+"\n") {
		t.Fatalf("echo %s: exit %d, stdout %q", word, code, out.String())
	}
	return err
}

func TestSSHExecerErrors(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{ReadyDelay: time.Hour}})
	c := g.Client(t, openshell.Config{})
	if _, err := openshell.API(c).CreateSandbox(ctxFor(t), &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "slow"}); err != nil {
		t.Fatal(err)
	}
	x := sshVia(t, c)
	closed := c.SSH(openshell.SSHConfig{})
	closed.Close()
	for _, tc := range []struct {
		name string
		x    relay.Execer
		cmd  relay.Command
		want error
	}{
		{"UnknownSandbox", x, relay.Command{Sandbox: "nope", Argv: []string{"true"}}, relay.ErrNotFound},
		{"NotReady", x, relay.Command{Sandbox: "slow", Argv: []string{"true"}}, relay.ErrNotReady},
		{"InvalidCommand", x, relay.Command{Sandbox: "slow", Argv: []string{"echo", "a\x00b"}}, relay.ErrInvalid},
		{"Closed", closed, relay.Command{Sandbox: "slow", Argv: []string{"true"}}, net.ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.x.Exec(ctxFor(t), &tc.cmd); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want one wrapping %v", err, tc.want)
			}
		})
	}
}

// TestSSHExecerRecovers: after a dropped relay, an expired token, a
// sandbox recreated under its name, the next Exec works again, on a new
// connection (and token) as needed; Close revokes the token.
func TestSSHExecerRecovers(t *testing.T) {
	const ttl = 500 * time.Millisecond
	g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{SSHSessionTTL: ttl}})
	var cut relaytest.Cutter
	c := g.Client(t, openshell.Config{Dialer: cut.Dial})
	g.Sandbox(t, c, "box")
	x := c.SSH(openshell.SSHConfig{})
	defer x.Close()
	created := func() int { return strings.Count(g.Seen.String(), `msg="ssh session created"`) }

	if err := echo(t, x, "box", "first"); err != nil {
		t.Fatal(err)
	}
	if err := echo(t, x, "box", "reused"); err != nil || created() != 1 {
		t.Fatalf("second exec: %v, %d tokens; want the connection reused", err, created())
	}

	// A command running when the relay drops fails as a lost relay.
	done := make(chan error, 1)
	go func() {
		_, err := x.Exec(context.Background(), &relay.Command{Sandbox: "box", Argv: []string{"sleep", "600"}})
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	cut.Cut()
	if err := <-done; !errors.Is(err, relay.ErrRelayLost) {
		t.Fatalf("exec under a dropped relay: %v, want relay.ErrRelayLost", err)
	}
	if err := echo(t, x, "box", "redialled"); err != nil {
		t.Fatalf("exec after a drop: %v", err)
	}

	// The token expires; the live connection runs on, a new one needs a
	// new token.
	time.Sleep(ttl + 100*time.Millisecond)
	if err := echo(t, x, "box", "still"); err != nil {
		t.Fatalf("exec on a connection whose token expired: %v", err)
	}
	// (Under a slow test run the token may have expired before the
	// redial above already; count from here.)
	tokens := created()
	cut.Cut()
	if err := echo(t, x, "box", "renewed"); err != nil || created() != tokens+1 {
		t.Fatalf("exec after expiry and a drop: %v, %d tokens; want one more than %d", err, created(), tokens)
	}

	// The sandbox is recreated under its name: a new id.
	other := g.Client(t, openshell.Config{})
	if err := other.Delete(ctxFor(t), "box"); err != nil {
		t.Fatal(err)
	}
	g.Sandbox(t, other, "box")
	if err := echo(t, x, "box", "recreated"); err != nil {
		t.Fatalf("exec in a recreated sandbox: %v", err)
	}
	// Recreated again once the token has expired: the new token is asked
	// for the stale id first.
	time.Sleep(ttl + 100*time.Millisecond)
	if err := other.Delete(ctxFor(t), "box"); err != nil {
		t.Fatal(err)
	}
	g.Sandbox(t, other, "box")
	cut.Cut()
	if err := echo(t, x, "box", "recreated after expiry"); err != nil {
		t.Fatalf("exec in a sandbox recreated after the token expired: %v", err)
	}

	x.Close()
	if !strings.Contains(g.Seen.String(), `msg="ssh session revoked"`) {
		t.Fatal("Close did not revoke the token")
	}
}

// TestSSHExecerBusy: past the gateway's 20 SSH connections per sandbox
// (each SSH execer keeps one open), a new one is refused with
// relay.ErrBusy, which says to wait rather than that the command is bad.
func TestSSHExecerBusy(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	for i := range 20 {
		if err := echo(t, sshVia(t, c), "box", "held"); err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
	}
	err := echo(t, sshVia(t, c), "box", "one-too-many")
	if !errors.Is(err, relay.ErrBusy) {
		t.Fatalf("21st connection: err = %v, want one wrapping relay.ErrBusy", err)
	}
}
