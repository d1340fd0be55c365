package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/session/s3store"
	"github.com/ferry-dev/ferry/session/s3store/s3test"
)

// TestSessionPruneIdle: `session prune --idle 14d` removes the keys
// whose newest snapshot is older than 14 days, with their chunks, and
// keeps the others; --dry-run reports the same and removes nothing; on a
// directory store and on S3 (versitygw on loopback).
func TestSessionPruneIdle(t *testing.T) {
	for _, tc := range []struct {
		name string
		// open returns the store's --store location and a backend onto
		// it for the test's own saves and checks.
		open func(t *testing.T) (string, session.Backend, bool)
	}{
		{"Dir", func(t *testing.T) (string, session.Backend, bool) {
			dir := filepath.Join(t.TempDir(), "store")
			b, err := local.NewDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			return dir, b, false
		}},
		{"S3", func(t *testing.T) (string, session.Backend, bool) {
			srv := s3test.Start(t)
			t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
			t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
			t.Setenv("AWS_REGION", srv.Region)
			t.Setenv("AWS_ENDPOINT_URL", srv.Endpoint)
			b, err := s3store.New(context.Background(), s3store.Config{
				Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "p", Region: srv.Region,
				AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
			})
			if err != nil {
				t.Fatal(err)
			}
			return "s3://" + srv.Bucket + "/p", b, true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			isolate(t)
			ctx := context.Background()
			loc, b, pack := tc.open(t)
			clock := time.Now().Add(-20 * 24 * time.Hour)
			st, err := session.New(session.Config{Backend: b, Pack: pack, Now: func() time.Time { return clock }})
			if err != nil {
				t.Fatal(err)
			}
			seed := func(key string, n int) {
				dir := t.TempDir()
				for i := range 5 {
					if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.jsonl", i)), []byte(fmt.Sprintf("%s %d %d\n", key, n, i)), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := st.Save(ctx, key, session.DirSource{Dir: dir}); err != nil {
					t.Fatal(err)
				}
			}
			seed("idle", 1)
			seed("idle", 2)
			seed("fresh", 1)
			clock = time.Now().Add(-24 * time.Hour)
			seed("fresh", 2)
			objects := func() int {
				n := 0
				if err := b.List(ctx, "", func(session.ObjectInfo) error { n++; return nil }); err != nil {
					t.Fatal(err)
				}
				return n
			}
			before := objects()

			r := runFerry(t, nil, "--store", loc, "--json", "session", "prune", "--idle", "14d", "--grace", "1ms", "--dry-run")
			wantOK(t, r)
			m := decode(t, r.stdout, "snapshots", "idle_keys", "dry_run")
			idle, _ := m["idle_keys"].([]any)
			if len(idle) != 1 || idle[0].(map[string]any)["key"] != "idle" || len(m["snapshots"].([]any)) != 2 || m["dry_run"] != true {
				t.Fatalf("dry run: %s; want idle's 2 snapshots", r.stdout)
			}
			if n := objects(); n != before {
				t.Fatalf("dry run changed the store: %d objects, %d before", n, before)
			}

			r = runFerry(t, nil, "--store", loc, "--json", "session", "prune", "--idle", "14d", "--grace", "1ms")
			wantOK(t, r)
			m = decode(t, r.stdout, "snapshots", "idle_keys", "chunks", "packs")
			if len(m["snapshots"].([]any)) != 2 || m["chunks"].(float64)+m["packs"].(float64) == 0 {
				t.Fatalf("prune --idle 14d: %s; want idle's snapshots and chunks removed", r.stdout)
			}
			if _, ok := m["dry_run"]; ok {
				t.Errorf("a real prune says dry_run: %s", r.stdout)
			}
			if keys, err := st.Keys(ctx); err != nil || !slices.Equal(keys, []string{"fresh"}) {
				t.Fatalf("keys after prune: %q, %v; want fresh only", keys, err)
			}
			if v, err := st.Verify(ctx, ""); err != nil || !v.OK() || v.Snapshots != 2 {
				t.Fatalf("verify after prune: %+v, %v; want fresh's 2 snapshots whole", v, err)
			}

			// A Go duration works as well, and nothing is idle for 30 days.
			r = runFerry(t, nil, "--store", loc, "session", "prune", "--idle", "720h")
			if r.code != 0 || r.stderr != "removed 0 snapshot(s) and 0 chunk(s), 0 B stored\n" {
				t.Errorf("prune --idle 720h: exit %d, stderr %q", r.code, r.stderr)
			}
			for _, bad := range []string{"2w", "-1d", "-1h", "d"} {
				wantUsage(t, runFerry(t, nil, "--store", loc, "session", "prune", "--idle", bad), "--idle")
			}
		})
	}
}

func TestDaysFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"14d", 14 * 24 * time.Hour, true},
		{"0", 0, true},
		{"0d", 0, true},
		{"336h", 336 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true},
		{"90m", 90 * time.Minute, true},
		{"1.5d", 0, false},
		{"-1d", 0, false},
		{"-5m", 0, false},
		{"2w", 0, false},
		{"d", 0, false},
		{"", 0, false},
	} {
		var d days
		err := d.Set(tc.in)
		if (err == nil) != tc.ok || tc.ok && time.Duration(d) != tc.want {
			t.Errorf("Set(%q) = %v, %v; want %v, ok %v", tc.in, time.Duration(d), err, tc.want, tc.ok)
		}
	}
}
