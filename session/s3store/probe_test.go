package s3store_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ferry-dev/ferry/session/s3store"
)

// TestNoConditionalWrites checks, against a server that ignores
// If-None-Match and accepts every request, that the probe notices, and
// that New refuses such a server when conditional writes are required.
// (The lease that then keeps commits exclusive is tested against
// versitygw in lease_test.go.)
func TestNoConditionalWrites(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"d41d8cd98f00b204e9800998ecf8427e"`)
	}))
	defer srv.Close()
	ctx := context.Background()
	c := s3store.Config{Endpoint: srv.URL, Bucket: "bucket", Region: "us-east-1", AccessKeyID: "k", SecretAccessKey: "s"}
	b, err := s3store.New(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if b.ConditionalWrites() {
		t.Fatal("the probe found conditional writes on a server that ignores them")
	}
	c.Commit = s3store.CommitConditional
	if _, err := s3store.New(ctx, c); !errors.Is(err, s3store.ErrNoConditionalWrites) {
		t.Fatalf("New requiring conditional writes: %v, want ErrNoConditionalWrites", err)
	}
}
