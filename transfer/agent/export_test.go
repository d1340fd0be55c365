package agent

import (
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Codec is the connections' codec, for the tests outside the package.
var Codec encoding.CodecV2 = codec{}

// Release is release, for tests that play a data message's consumer.
func Release(b []byte) { release(b) }

// UnmarshalBytes is Unmarshal's hand parser of a one-field message.
func UnmarshalBytes(data mem.BufferSlice, f protowire.Number) ([]byte, bool) {
	return unmarshalBytes(data, f)
}

// Data fields, for tests of UnmarshalBytes.
const (
	PutDataField      = putDataField
	GetDataField      = getDataField
	RestoreChunkField = restoreChunkField
)

// HookBuffers has acquire see every buffer Unmarshal fills from the pool
// and release every buffer release takes (before the pool does), until
// the test ends. The hooks are global: the test must not be parallel.
func HookBuffers(t testing.TB, acquire, rel func([]byte)) {
	acquireHook.Store(&acquire)
	releaseHook.Store(&rel)
	t.Cleanup(func() {
		acquireHook.Store(nil)
		releaseHook.Store(nil)
	})
}
