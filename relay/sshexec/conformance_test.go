package sshexec_test

import (
	"context"
	"net"
	"testing"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/relaytest"
	"github.com/ferry-dev/ferry/relay/sshexec"
	"github.com/ferry-dev/ferry/relay/sshexec/sshdtest"
)

func TestConformance(t *testing.T) {
	srv := sshdtest.Start(t)
	relaytest.Run(t, relaytest.Harness{
		New: func(t *testing.T) (relay.Execer, string) { return newClient(t, srv, nil), "sshd" },
		Cut: func(t *testing.T, n int64) (relay.Execer, string) {
			return newClient(t, srv, func(cfg *sshexec.Config) {
				cfg.Dial = func(ctx context.Context) (net.Conn, error) {
					var d net.Dialer
					nc, err := d.DialContext(ctx, "tcp", srv.Addr)
					if err != nil {
						return nil, err
					}
					return &cutConn{Conn: nc, left: n}, nil
				}
			}), "sshd"
		},
		// The wrapper's shell reports its child's death by SIGKILL as
		// 128+9, and so would an exit-signal "KILL".
		KilledExit: 137,
	})
}
