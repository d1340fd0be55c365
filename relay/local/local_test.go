package local_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/local"
	"github.com/ferry-dev/ferry/relay/relaytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	newRunner := func(t *testing.T, cfg local.Config) (relay.Execer, string) {
		cfg.Dir = t.TempDir()
		r, err := local.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r, "local"
	}
	relaytest.Run(t, relaytest.Harness{
		New: func(t *testing.T) (relay.Execer, string) { return newRunner(t, local.Config{}) },
		Cut: func(t *testing.T, n int64) (relay.Execer, string) {
			x, box := newRunner(t, local.Config{})
			return relaytest.CutOutput(x, n), box
		},
		KilledExit: 137,
	})
}

func TestLoginShellMode(t *testing.T) {
	dir := t.TempDir()
	r, err := local.New(local.Config{Dir: dir, Shell: []string{"/bin/bash", "-lc"}, Env: []string{"HOME=" + dir, "PATH=/usr/bin:/bin"}, KilledExitCode: 1})
	if err != nil {
		t.Fatal(err)
	}
	relaytest.Run(t, relaytest.Harness{
		New: func(t *testing.T) (relay.Execer, string) { return r, "shell" },
		Cut: func(t *testing.T, n int64) (relay.Execer, string) {
			c, err := local.New(local.Config{Dir: t.TempDir(), Shell: []string{"/bin/bash", "-lc"}})
			if err != nil {
				t.Fatal(err)
			}
			return relaytest.CutOutput(c, n), "shell"
		},
		KilledExit: 1,
		BigSize:    64 << 20,
	})
}
