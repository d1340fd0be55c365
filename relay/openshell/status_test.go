package openshell

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferry-dev/ferry/relay"
)

// TestStatusErrorResourceExhausted: RESOURCE_EXHAUSTED is a gateway
// limit on connections (wait and retry), unless gRPC says it of a message
// over its size limit (retrying cannot help).
func TestStatusErrorResourceExhausted(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want error
	}{
		{"at most 20 concurrent ssh connections per sandbox", relay.ErrBusy},
		{"at most 3 concurrent connections per ssh session token", relay.ErrBusy},
		{"grpc: received message larger than max (2000000 vs. 1048576)", relay.ErrInvalid},
	} {
		err := statusError("exec in box", status.Error(codes.ResourceExhausted, tc.msg))
		if !errors.Is(err, tc.want) {
			t.Errorf("%q: err = %v, want one wrapping %v", tc.msg, err, tc.want)
		}
	}
}
