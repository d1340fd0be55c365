package proto_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
)

// TestExecSandboxInputRoundTrip checks the first message of ferry's main data
// path both ways, and pins one stdin chunk's bytes as a real gateway would
// see them, which the descriptor comparison alone cannot show.
func TestExecSandboxInputRoundTrip(t *testing.T) {
	start := &openshellv1.ExecSandboxInput{
		Payload: &openshellv1.ExecSandboxInput_Start{Start: &openshellv1.ExecSandboxRequest{
			SandboxId:      "sb-1",
			Command:        []string{"/bin/bash", "-c", "cat > f"},
			Workdir:        "/sandbox",
			Environment:    map[string]string{"LANG": "C"},
			TimeoutSeconds: 30,
			Tty:            false,
		}},
	}
	b, err := proto.Marshal(start)
	if err != nil {
		t.Fatalf("marshal start: %v", err)
	}
	var got openshellv1.ExecSandboxInput
	if err := proto.Unmarshal(b, &got); err != nil {
		t.Fatalf("unmarshal start: %v", err)
	}
	if !proto.Equal(start, &got) {
		t.Fatalf("round trip changed the message:\n sent %v\n got  %v", start, &got)
	}
	if got.GetStart().GetSandboxId() != "sb-1" {
		t.Fatalf("start.sandbox_id = %q after round trip", got.GetStart().GetSandboxId())
	}

	// Field 2, length-delimited (tag 0x12), then the length and the bytes.
	chunk := &openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Stdin{Stdin: []byte{0, 1, 0xff}}}
	b, err = proto.Marshal(chunk)
	if err != nil {
		t.Fatalf("marshal stdin: %v", err)
	}
	if want := []byte{0x12, 3, 0, 1, 0xff}; !bytes.Equal(b, want) {
		t.Fatalf("stdin chunk encodes as % x, want % x", b, want)
	}
}
