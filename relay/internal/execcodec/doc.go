// Package execcodec is the gRPC codec of the exec channel: gRPC's protobuf
// codec, byte for byte on the wire, except that it receives the bulk
// messages without the two copies and the allocation of the general path.
//
// gRPC's proto codec gathers a received message's frames into one buffer
// and proto.Unmarshal then copies a bytes field into a fresh allocation:
// two copies and 256 KiB of garbage per stdin or output message. For an
// ExecSandboxInput that holds only stdin, and an ExecSandboxEvent that
// holds only stdout or stderr, Unmarshal here reads the protobuf header by
// hand and copies the payload once, from gRPC's frames into a buffer from a
// pool. Every other message, and any of those two with another field, an
// unknown field or a field repeated, goes through proto.Unmarshal.
//
// Ownership: the payload (ExecSandboxInput.Stdin, ExecSandboxStdout.Data,
// ExecSandboxStderr.Data) belongs to whoever received the message. Whoever
// reads it last hands it back with [Release], once, when no slice of it is
// held anywhere; a payload never released is left to the GC, which is
// harmless. A use after Release is silent data corruption, so tests turn
// on [Debug], which poisons released payloads and panics on a double
// release.
package execcodec
