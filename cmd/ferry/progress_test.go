package main

import (
	"bytes"
	"io"
	"os"
	"testing"
)

// TestProgressTotalOnlyForALine: the total (a walk of an upload's whole
// tree) is taken only when there is a line to draw, never for a pipe, a
// file, --quiet or --json, where nobody would see it and the transfer
// would wait for it.
func TestProgressTotalOnlyForALine(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tests := []struct {
		name  string
		w     io.Writer
		quiet bool
	}{
		{"buffer", &bytes.Buffer{}, false},
		{"file", f, false},
		{"quiet file", f, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called := false
			p := newProgress(tt.w, tt.quiet, func() int64 { called = true; return 1 })
			p.Close()
			if p != nil || called {
				t.Fatalf("progress %v, total taken %v: want neither", p != nil, called)
			}
		})
	}
}
