package stores_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/s3store/s3test"
	"github.com/ferry-dev/ferry/session/stores"
)

func save(t *testing.T, st *session.Store, key string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte(strings.Repeat("session ", 4096)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Save(context.Background(), key, session.DirSource{Dir: dir}); err != nil {
		t.Fatalf("save: %v", err)
	}
}

func TestOpenDirectory(t *testing.T) {
	ctx := context.Background()
	loc := filepath.Join(t.TempDir(), "store")
	_, err := stores.Open(ctx, loc, stores.Options{})
	var missing *stores.MissingError
	if !errors.As(err, &missing) || !missing.Dir || !errors.Is(err, session.ErrNoStore) {
		t.Fatalf("open of a missing directory: err = %v, want a *MissingError for a directory matching session.ErrNoStore", err)
	}
	if _, err := os.Stat(loc); !os.IsNotExist(err) {
		t.Fatalf("a read-only open created %s", loc)
	}
	st, err := stores.Open(ctx, loc, stores.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	save(t, st, "k")
	st, err = stores.Open(ctx, loc, stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Load(ctx, "k", 0); err != nil {
		t.Fatalf("load from the reopened store: %v", err)
	}
}

func TestOpenBadLocation(t *testing.T) {
	for _, loc := range []string{"ftp://host/x", "s3://", "s3://Bad_Bucket/../x"} {
		_, err := stores.Open(context.Background(), loc, stores.Options{})
		if !errors.Is(err, stores.ErrLocation) {
			t.Errorf("Open(%q) = %v, want ErrLocation naming it", loc, err)
		}
	}
}

// TestOpenS3 opens an S3 store as the CLI does, credentials from the
// environment: it writes packs, reads through the chunk cache, and a
// missing bucket is a *MissingError.
func TestOpenS3(t *testing.T) {
	srv := s3test.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	ctx := context.Background()
	cacheDir := filepath.Join(t.TempDir(), "cache")
	st, err := stores.Open(ctx, "s3://"+srv.Bucket+"/p", stores.Options{Endpoint: srv.Endpoint, CacheDir: cacheDir})
	if err != nil {
		t.Fatal(err)
	}
	save(t, st, "k")
	var packs, loose int
	for _, k := range srv.Keys(t, srv.Bucket, "p/") {
		switch {
		case strings.HasPrefix(k, "p/packs/"):
			packs++
		case strings.HasPrefix(k, "p/chunks/"):
			loose++
		}
	}
	if packs == 0 || loose != 0 {
		t.Fatalf("%d packs and %d loose chunks, want packs only", packs, loose)
	}
	m, err := st.Load(ctx, "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Check(ctx, m); err != nil {
		t.Fatal(err)
	}
	cached, _ := os.ReadDir(cacheDir)
	if len(cached) == 0 {
		t.Fatal("nothing went through the chunk cache")
	}
	_, err = stores.Open(ctx, "s3://no-such-bucket-here/p", stores.Options{Endpoint: srv.Endpoint, NoCache: true})
	var missing *stores.MissingError
	if !errors.As(err, &missing) || missing.Dir || !errors.Is(err, session.ErrNoStore) {
		t.Fatalf("open of a missing bucket: err = %v, want a *MissingError matching session.ErrNoStore", err)
	}
}
