package openshell

import (
	"context"
	"net"

	"google.golang.org/grpc/credentials"

	"github.com/ferry-dev/ferry/internal/h2early"
)

// earlyCreds lets a connection's first call leave with the client's side
// of the handshake rather than a round trip later.
//
// grpc-go's client (newHTTP2Client) sends no call until the server's
// HTTP/2 SETTINGS have come. A TLS server sends them once it has the
// client's Finished, and a plaintext one once it has accepted, so the wait
// is one round trip on every new connection: on a 160 ms link, 160 ms of
// every command. HTTP/2 does not ask a client to wait (RFC 9113 §3.4: it
// may send frames right after its preface, under the protocol's
// defaults), and other clients, the h2 crate under OpenShell's own CLI
// among them, do not.
//
// So the connection is an h2early one: it hands grpc an empty SETTINGS
// frame first, and drops the ACK grpc answers it with, which hyper's h2,
// under the OpenShell gateway, would end the connection for. The
// handshake under it is done before grpc has the connection, so the
// server is verified before anything is sent.
type earlyCreds struct {
	credentials.TransportCredentials
}

func (c earlyCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return conn, info, err
	}
	return h2early.Wrap(conn), info, nil
}

func (c earlyCreds) Clone() credentials.TransportCredentials {
	return earlyCreds{c.TransportCredentials.Clone()}
}
