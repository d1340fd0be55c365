package openshell_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
)

// TestIDDir: entries round-trip and are forgotten; a file that is not an
// entry for its key (another key's, cut short, an id with spaces or too
// long) is no entry.
func TestIDDir(t *testing.T) {
	d := openshell.IDDir(filepath.Join(t.TempDir(), "ids"))
	if _, ok := d.LoadID("gw ws box"); ok {
		t.Fatal("an entry in an empty cache")
	}
	d.StoreID("gw ws box", "id-1")
	d.StoreID("gw ws other", "id-2")
	if id, ok := d.LoadID("gw ws box"); !ok || id != "id-1" {
		t.Fatalf("load = %q, %v; want id-1", id, ok)
	}
	d.ForgetID("gw ws box")
	if _, ok := d.LoadID("gw ws box"); ok {
		t.Fatal("a forgotten entry")
	}
	if id, ok := d.LoadID("gw ws other"); !ok || id != "id-2" {
		t.Fatalf("the other entry = %q, %v; want id-2", id, ok)
	}

	// Rewrite the one file there is with bad contents.
	files, err := os.ReadDir(string(d))
	if err != nil || len(files) != 1 {
		t.Fatalf("cache files %v, %v; want 1", files, err)
	}
	path := filepath.Join(string(d), files[0].Name())
	for _, bad := range []string{
		"gw ws box\nid-2\n",   // another key's entry under this hash
		"gw ws other\n",       // no id
		"gw ws other\nid 2\n", // not an id
		"gw ws other\n\n",     // empty id
		"gw ws other\n" + strings.Repeat("x", 300) + "\n",
	} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if id, ok := d.LoadID("gw ws other"); ok {
			t.Errorf("file %q gave id %q, want no entry", bad, id)
		}
	}
}

// TestIDsShared: a Client whose IDs another Client filled runs its
// command with no lookup; a sandbox recreated under the name since is
// found again (the stale id's NOT_FOUND, one lookup) and the cache then
// holds the new id; a stopped one fails naming its phase, as it would
// without the cache.
func TestIDsShared(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	ids := openshell.IDDir(t.TempDir())
	first := g.Client(t, openshell.Config{IDs: ids})
	g.Sandbox(t, first, "box")
	if err := echo(t, first, "box", "first"); err != nil {
		t.Fatal(err)
	}

	second := g.Client(t, openshell.Config{IDs: ids})
	before := g.Calls(getSandbox)
	if err := echo(t, second, "box", "second"); err != nil {
		t.Fatal(err)
	}
	if n := g.Calls(getSandbox) - before; n != 0 {
		t.Fatalf("%d GetSandbox calls with the id in the cache, want 0", n)
	}

	if err := first.Delete(ctxFor(t), "box"); err != nil {
		t.Fatal(err)
	}
	other := g.Client(t, openshell.Config{}) // recreates it without telling the cache
	g.Sandbox(t, other, "box")
	newID, err := other.SandboxID(ctxFor(t), "box")
	if err != nil {
		t.Fatal(err)
	}
	stale := g.Client(t, openshell.Config{IDs: ids})
	ids.StoreID(openshell.IDKey(stale, "box"), "872d8802-ab19-41bd-9741-0ca7e77a7cca")
	before = g.Calls(getSandbox)
	if err := echo(t, stale, "box", "recreated"); err != nil {
		t.Fatalf("exec through a stale cached id: %v", err)
	}
	if n := g.Calls(getSandbox) - before; n != 1 {
		t.Fatalf("%d GetSandbox calls after a stale id, want 1", n)
	}
	if id, ok := ids.LoadID(openshell.IDKey(stale, "box")); !ok || id != newID {
		t.Fatalf("cached id %q, %v after the lookup; want the new %q", id, ok, newID)
	}

	if _, err := other.Stop(ctxFor(t), "box"); err != nil {
		t.Fatal(err)
	}
	late := g.Client(t, openshell.Config{IDs: ids})
	err = echo(t, late, "box", "stopped")
	if !errors.Is(err, relay.ErrNotReady) || !strings.Contains(err.Error(), "phase") {
		t.Fatalf("exec into a stopped sandbox by a cached id: %v, want relay.ErrNotReady naming the phase", err)
	}
}
