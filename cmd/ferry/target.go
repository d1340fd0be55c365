package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/sshexec"
	"github.com/ferry-dev/ferry/transfer/agent"
)

// client dials the gateway the global flags and OpenShell settings name.
func (g *globals) client() (*openshell.Client, error) {
	if err := g.checkTransport(); err != nil {
		return nil, err
	}
	if g.ssh != "" {
		return nil, usagef("--ssh reaches one machine directly; sandbox commands need a gateway")
	}
	settings, err := openshell.Resolve(openshell.Sources{Endpoint: g.gateway})
	if err != nil {
		return nil, err
	}
	if g.workspace != "" {
		settings.Workspace = g.workspace
	}
	return openshell.Dial(openshell.Config{Settings: settings, IDs: idCache()})
}

// idCache is where commands keep the sandbox ids they resolve for the
// next command, so that it asks the gateway one round trip less:
// $XDG_CACHE_HOME/ferry/sandbox-ids (~/.cache/ferry/sandbox-ids). Nil,
// no cache, without a cache directory.
func idCache() openshell.IDCache {
	dir, err := os.UserCacheDir()
	if err != nil {
		return nil
	}
	return openshell.IDDir(filepath.Join(dir, "ferry", "sandbox-ids"))
}

// withClient runs fn with a gateway client that it closes afterwards.
func (g *globals) withClient(fn func(*openshell.Client) error) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// Values of --transport.
const (
	transportExec = "exec"
	transportSSH  = "ssh"
)

// checkTransport refuses a --transport that names no transport, and
// --transport ssh with --ssh, which is direct SSH already.
func (g *globals) checkTransport() error {
	switch g.transport {
	case transportExec:
	case transportSSH:
		if g.ssh != "" {
			return usagef("--transport ssh goes through a gateway; --ssh is direct SSH already")
		}
	default:
		return usagef("--transport %q: want exec or ssh", g.transport)
	}
	return nil
}

// execer returns the channel to run commands on, and its closer.
func (g *globals) execer() (relay.Execer, func(), error) {
	if err := g.checkTransport(); err != nil {
		return nil, nil, err
	}
	if g.ssh == "" {
		c, err := g.client()
		if err != nil {
			return nil, nil, err
		}
		x, closeFn := g.execerOn(c)
		return x, func() {
			closeFn()
			c.Close()
		}, nil
	}
	user, addr, err := parseSSH(g.ssh)
	if err != nil {
		return nil, nil, err
	}
	c, err := sshexec.New(sshexec.Config{
		User:                  user,
		Addr:                  addr,
		IdentityFile:          g.sshKey,
		KnownHostsFile:        g.sshKnown,
		InsecureIgnoreHostKey: g.sshInsec,
	})
	if err != nil {
		return nil, nil, err
	}
	return sshHints{c}, func() { c.Close() }, nil
}

// execerOn is the channel to run commands on through the gateway client
// c, and its closer, which leaves c open: a caller that has a client
// already (ferry run's, for the sandbox's log) runs its commands through
// the same connection and the same cache of sandbox ids, rather than
// dialling the gateway and resolving the sandbox a second time. It needs
// the gateway transports (no --ssh).
func (g *globals) execerOn(c *openshell.Client) (relay.Execer, func()) {
	if g.transport == transportSSH {
		x := c.SSH(openshell.SSHConfig{})
		return x, func() { x.Close() }
	}
	return c, func() {}
}

// sshHints names the CLI flag where sshexec's errors name its Config field.
type sshHints struct{ *sshexec.Client }

func (h sshHints) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	code, err := h.Client.Exec(ctx, cmd)
	if errors.Is(err, sshexec.ErrUnknownHostKey) || errors.Is(err, sshexec.ErrHostKeyMismatch) {
		err = fmt.Errorf("%w (the flag for that is --ssh-insecure-ignore-host-key)", err)
	}
	return code, err
}

// parseSSH splits USER@HOST[:PORT]; USER may be left out.
func parseSSH(s string) (user, addr string, err error) {
	host := s
	if i := strings.LastIndex(s, "@"); i >= 0 {
		user, host = s[:i], s[i+1:]
	}
	if host == "" {
		return "", "", usagef("--ssh %q: no host", s)
	}
	if _, _, err := net.SplitHostPort(host); err != nil {
		var addrErr *net.AddrError
		if !errors.As(err, &addrErr) || !strings.Contains(addrErr.Err, "missing port") {
			return "", "", usagef("--ssh %q: %v", s, err)
		}
		host = net.JoinHostPort(strings.Trim(host, "[]"), "22")
	}
	return user, host, nil
}

func splitEnv(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	env := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("--env %q: want KEY=VALUE", kv)
		}
		env[k] = v
	}
	return env, nil
}

// agentMemory is agent.Memory in the cache directory,
// $XDG_CACHE_HOME/ferry/agents: one entry per sandbox where ferry's agent
// has answered, keyed by how the sandbox is reached and its name, so that
// the next command there sends its first call with its hello. An entry
// it cannot read or write is one it does not have.
type agentMemory struct {
	dir   openshell.IDDir
	scope string // the gateway and workspace, or the SSH target
}

const answered = "answered"

func (m agentMemory) key(sandbox string) string { return m.scope + " " + sandbox }

func (m agentMemory) Answered(sandbox string) bool {
	v, ok := m.dir.LoadID(m.key(sandbox))
	return ok && v == answered
}

func (m agentMemory) Remember(sandbox string, ok bool) {
	switch {
	case !ok:
		m.dir.ForgetID(m.key(sandbox))
	case !m.Answered(sandbox):
		m.dir.StoreID(m.key(sandbox), answered)
	}
}

// agentMemory is where this command's sandboxes are remembered; nil
// without a cache directory or settings to scope it by.
func (g *globals) agentMemory() agent.Memory {
	dir, err := os.UserCacheDir()
	if err != nil {
		return nil
	}
	scope := "ssh " + g.ssh
	if g.ssh == "" {
		settings, err := openshell.Resolve(openshell.Sources{Endpoint: g.gateway})
		if err != nil {
			return nil
		}
		if g.workspace != "" {
			settings.Workspace = g.workspace
		}
		scope = "gateway " + settings.Endpoint + " " + settings.Workspace
	}
	return agentMemory{dir: openshell.IDDir(filepath.Join(dir, "ferry", "agents")), scope: scope}
}
