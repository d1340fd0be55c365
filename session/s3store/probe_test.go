package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ferry-dev/ferry/session/s3store"
)

// TestNoConditionalWrites checks, against a server that ignores
// If-None-Match and accepts every request, that the probe notices and
// that an exclusive Put then refuses instead of racing.
func TestNoConditionalWrites(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"d41d8cd98f00b204e9800998ecf8427e"`)
	}))
	defer srv.Close()
	ctx := context.Background()
	b, err := s3store.New(ctx, s3store.Config{Endpoint: srv.URL, Bucket: "bucket", Region: "us-east-1", AccessKeyID: "k", SecretAccessKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if b.ConditionalWrites() {
		t.Fatal("the probe found conditional writes on a server that ignores them")
	}
	if err := b.Put(ctx, "snapshots/k/1", bytes.NewReader([]byte("m")), true); !errors.Is(err, s3store.ErrNoConditionalWrites) {
		t.Fatalf("exclusive Put: %v, want ErrNoConditionalWrites", err)
	}
	if err := b.Put(ctx, "chunks/ab/abcd", bytes.NewReader([]byte("c")), false); err != nil {
		t.Fatalf("plain Put: %v", err)
	}
}
