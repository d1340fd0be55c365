package server

import (
	"fmt"
	"io"
	"testing"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
)

// TestKnownFilesLazy: a streamed known list is received only as far as
// the walk has got, a batch at a time, so that the agent holds one batch
// and not the list: whatever the list's length, a walk at the i-th file
// has received the batches up to the one holding it and one more at most.
func TestKnownFilesLazy(t *testing.T) {
	const batch, batches = 100, 50
	received := 0
	next := 0
	recv := func() (*agentv1.ScanRequest, error) {
		if next == batches {
			return nil, io.EOF
		}
		req := &agentv1.ScanRequest{}
		for i := range batch {
			req.Known = append(req.Known, &agentv1.KnownFile{Path: fmt.Sprintf("f%05d", next*batch+i)})
		}
		next++
		received++
		return req, nil
	}
	k := &knownFiles{recv: recv}
	for i := range batch * batches {
		// Every other known file is gone from the walk.
		if i%2 == 1 {
			continue
		}
		p := fmt.Sprintf("f%05d", i)
		f, err := k.find(p)
		if err != nil || f == nil || f.GetPath() != p {
			t.Fatalf("find %s: %v, %v", p, f, err)
		}
		if want := i/batch + 1; received > want+1 {
			t.Fatalf("at %s: %d batches received, want at most %d", p, received, want+1)
		}
	}
	if f, err := k.find("g"); f != nil || err != nil || received != batches {
		t.Fatalf("past the end: %v, %v, %d of %d batches received", f, err, received, batches)
	}
}
