package s3store_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ferry-dev/ferry/session/s3store"
	"github.com/ferry-dev/ferry/session/s3store/s3test"
)

// clearAWS empties every variable the credential chain reads, so that
// each case names its own source. The container variables point the role
// lookup at a loopback server that has no credentials: no test reaches
// the real instance metadata service.
func clearAWS(t *testing.T, role string) {
	for _, k := range []string{
		"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SESSION_TOKEN",
		"AWS_SHARED_CREDENTIALS_FILE", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
	} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", role)
	// The shared file's default place is under HOME.
	t.Setenv("HOME", t.TempDir())
}

// TestCredentialChain opens a store with no keys in its Config, from each
// source of the AWS chain in turn, against versitygw.
func TestCredentialChain(t *testing.T) {
	srv := s3test.Start(t)
	var roleCalls atomic.Int64
	role := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		roleCalls.Add(1)
		http.NotFound(w, r)
	}))
	t.Cleanup(role.Close)
	open := func(t *testing.T) error {
		_, err := s3store.New(context.Background(), s3store.Config{Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.Bucket})
		return err
	}
	t.Run("environment", func(t *testing.T) {
		clearAWS(t, role.URL)
		t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
		if err := open(t); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("shared file and profile", func(t *testing.T) {
		clearAWS(t, role.URL)
		file := filepath.Join(t.TempDir(), "credentials")
		body := "[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n[ferry]\naws_access_key_id = " + srv.AccessKey + "\naws_secret_access_key = " + srv.SecretKey + "\n"
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", file)
		t.Setenv("AWS_PROFILE", "ferry")
		if err := open(t); err != nil {
			t.Fatal(err)
		}
		// The default profile's keys are wrong: the server refuses them.
		t.Setenv("AWS_PROFILE", "")
		if err := open(t); err == nil {
			t.Fatal("wrong keys from the default profile were accepted")
		}
	})
	t.Run("none", func(t *testing.T) {
		clearAWS(t, role.URL)
		before := roleCalls.Load()
		err := open(t)
		if err == nil || !strings.Contains(err.Error(), "no credentials") {
			t.Fatalf("err = %v, want one saying there are no credentials", err)
		}
		// The chain did reach its last source, the role.
		if roleCalls.Load() == before {
			t.Fatal("the container role was never asked")
		}
	})
}
