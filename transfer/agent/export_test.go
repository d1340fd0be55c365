package agent

import (
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// Codec is the connections' codec, for the tests outside the package.
var Codec encoding.CodecV2 = wire.Codec

// Release is wire.Release, for tests that play a data message's consumer.
func Release(b []byte) { wire.Release(b) }

// UnmarshalBytes is Unmarshal's hand parser of a one-field message.
func UnmarshalBytes(data mem.BufferSlice, f protowire.Number) ([]byte, bool) {
	return wire.UnmarshalBytes(data, f)
}

// Data fields, for tests of UnmarshalBytes.
const (
	PutDataField      = wire.PutDataField
	GetDataField      = wire.GetDataField
	RestoreChunkField = wire.RestoreChunkField
)

// HookBuffers has acquire see every buffer Unmarshal fills from the pool
// and release every buffer release takes (before the pool does), until
// the test ends. The hooks are global: the test must not be parallel.
func HookBuffers(t testing.TB, acquire, rel func([]byte)) {
	wire.AcquireHook.Store(&acquire)
	wire.ReleaseHook.Store(&rel)
	t.Cleanup(func() {
		wire.AcquireHook.Store(nil)
		wire.ReleaseHook.Store(nil)
	})
}

// RawRPC is c's generated client, for tests that send what the Client
// never would.
func RawRPC(c *Client) agentv1.AgentClient { return c.rpc }
