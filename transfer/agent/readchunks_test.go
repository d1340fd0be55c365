package agent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/codes"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/cdc"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// readsOf is a read of every chunk a scan reported.
func readsOf(es []agent.ScanEntry) []agent.ChunkRead {
	var reads []agent.ChunkRead
	for _, e := range es {
		for _, c := range e.Chunks {
			reads = append(reads, agent.ChunkRead{Path: e.Path, Offset: c.Offset, Size: c.Size, ID: c.ID})
		}
	}
	return reads
}

// TestReadChunks reads back every chunk of a compressible and a random
// file in each compression mode; AUTO compresses only what pays.
func TestReadChunks(t *testing.T) {
	c, ws := inProcess(t)
	random := make([]byte, 300<<10)
	rand.NewChaCha8([32]byte{1}).Read(random)
	text := bytes.Repeat([]byte("{\"role\":\"assistant\",\"text\":\"hello\"}\n"), 10000)
	files := map[string][]byte{"random": random, "text.jsonl": text}
	for n, data := range files {
		if err := os.WriteFile(filepath.Join(ws, n), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reads := readsOf(scanAll(t, c, ".", nil))
	var total int64
	for _, r := range reads {
		total += r.Size
	}
	for _, mode := range []frame.Mode{frame.Auto, frame.Zstd, frame.None} {
		got := map[string][]byte{}
		wire, err := c.ReadChunks(context.Background(), ws, reads, mode, func(i int, data []byte) error {
			got[reads[i].Path] = append(got[reads[i].Path], data...)
			return nil
		})
		if err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		for n, data := range files {
			if !bytes.Equal(got[n], data) {
				t.Errorf("%v: %s differs", mode, n)
			}
		}
		switch mode {
		case frame.None:
			if wire != total {
				t.Errorf("none: %d wire bytes for %d", wire, total)
			}
		case frame.Auto:
			if wire > int64(len(random))+int64(len(text))/10 {
				t.Errorf("auto: %d wire bytes for %d", wire, total)
			}
		}
	}
}

// TestReadChunksChanged: a file written to since the scan fails the read
// with ErrChanged, naming it; so does one cut short.
func TestReadChunksChanged(t *testing.T) {
	c, ws := inProcess(t)
	p := filepath.Join(ws, "log")
	if err := os.WriteFile(p, bytes.Repeat([]byte("line\n"), 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	reads := readsOf(scanAll(t, c, ".", nil))
	nop := func(int, []byte) error { return nil }
	// In this order: the last one leaves a symlink where the file was.
	for _, tc := range []struct {
		name   string
		change func() error
	}{
		{"rewritten", func() error { return os.WriteFile(p, bytes.Repeat([]byte("LINE\n"), 1000), 0o644) }},
		{"truncated", func() error { return os.Truncate(p, 10) }},
		{"replaced", func() error { os.Remove(p); return os.Symlink("missing-target", p) }},
	} {
		name, change := tc.name, tc.change
		if err := change(); err != nil {
			t.Fatal(err)
		}
		_, err := c.ReadChunks(context.Background(), ".", reads, frame.Auto, nop)
		re := (*agent.RemoteError)(nil)
		if name == "replaced" {
			// A symlink is not opened: ELOOP, not a changed file.
			if !errors.As(err, &re) || !strings.Contains(err.Error(), "log") {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if !errors.Is(err, agent.ErrChanged) || !errors.As(err, &re) || re.Code != codes.FailedPrecondition || re.Entry != p {
			t.Errorf("%s: %v (entry %q)", name, err, re.Entry)
		}
	}
}

// TestReadChunksEscape: a path out of dir, directly or through a
// symlink, reads nothing.
func TestReadChunksEscape(t *testing.T) {
	c, ws := inProcess(t)
	secret := []byte("secret outside the scanned directory")
	if err := os.WriteFile(filepath.Join(ws, "secret"), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", filepath.Join(ws, "dir", "up")); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(secret)
	for _, p := range []string{"../secret", "up/secret", filepath.Join(ws, "secret")} {
		reads := []agent.ChunkRead{{Path: p, Size: int64(len(secret)), ID: sum}}
		_, err := c.ReadChunks(context.Background(), "dir", reads, frame.None, func(int, []byte) error {
			t.Errorf("%s: read", p)
			return nil
		})
		if err == nil {
			t.Errorf("%s: no error", p)
		}
	}
}

func TestReadChunksRefusals(t *testing.T) {
	c, _ := inProcess(t)
	nop := func(int, []byte) error { return nil }
	for name, r := range map[string]agent.ChunkRead{
		"empty":       {Path: "f", Size: 0},
		"huge":        {Path: "f", Size: 1 << 30},
		"negative":    {Path: "f", Offset: -1, Size: 1},
		"NUL in path": {Path: "f\x00", Size: 1},
	} {
		if _, err := c.ReadChunks(context.Background(), ".", []agent.ChunkRead{r}, frame.None, nop); !errors.Is(err, agent.ErrInvalidPath) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// hostileReader answers ReadChunks with what send makes of each read.
type hostileReader struct {
	agentv1.UnimplementedAgentServer
	send func(i int, r *agentv1.ChunkRead, s agentv1.Agent_ReadChunksServer) error
}

func (h *hostileReader) ReadChunks(req *agentv1.ReadChunksRequest, s agentv1.Agent_ReadChunksServer) error {
	for i, r := range req.GetReads() {
		if err := h.send(i, r, s); err != nil {
			return err
		}
	}
	return nil
}

// TestReadChunksHostileAgent: the host checks every chunk it gets.
func TestReadChunksHostileAgent(t *testing.T) {
	data := bytes.Repeat([]byte("chunk data "), 1000)
	sum := sha256.Sum256(data)
	reads := []agent.ChunkRead{
		{Path: "f", Size: int64(len(data)), ID: sum},
		{Path: "f", Offset: int64(len(data)), Size: int64(len(data)), ID: sum},
	}
	enc, _ := zstd.NewWriter(nil)
	defer enc.Close()
	bomb := enc.EncodeAll(bytes.Repeat(data, 100), nil)
	other := bytes.Repeat([]byte("other data "), 1000)
	// wide is data in a frame that declares a 256 KiB window, over the
	// session store's chunk bound (cdc.Default().Max): the store's reader
	// would refuse it, so the host must not hand it on to be kept.
	noSingle, _ := zstd.NewWriter(nil, zstd.WithSingleSegment(false))
	defer noSingle.Close()
	wide := noSingle.EncodeAll(data, nil)
	if wide[4]&(1<<5) != 0 {
		t.Fatalf("frame header %x: single segment, no window descriptor", wide[:6])
	}
	wide[5] = 8 << 3
	for name, send := range map[string]func(int, *agentv1.ChunkRead, agentv1.Agent_ReadChunksServer) error{
		"wrong bytes": func(i int, r *agentv1.ChunkRead, s agentv1.Agent_ReadChunksServer) error {
			return s.Send(&agentv1.ReadChunksResponse{Index: uint32(i), Data: other})
		},
		"wrong compressed bytes": func(i int, r *agentv1.ChunkRead, s agentv1.Agent_ReadChunksServer) error {
			return s.Send(&agentv1.ReadChunksResponse{Index: uint32(i), Data: enc.EncodeAll(other, nil), Zstd: true})
		},
		"short": func(i int, r *agentv1.ChunkRead, s agentv1.Agent_ReadChunksServer) error {
			return s.Send(&agentv1.ReadChunksResponse{Index: uint32(i), Data: data[1:]})
		},
		"long": func(i int, r *agentv1.ChunkRead, s agentv1.Agent_ReadChunksServer) error {
			return s.Send(&agentv1.ReadChunksResponse{Index: uint32(i), Data: append(data, 'x')})
		},
		"bomb": func(i int, r *agentv1.ChunkRead, s agentv1.Agent_ReadChunksServer) error {
			return s.Send(&agentv1.ReadChunksResponse{Index: uint32(i), Data: bomb, Zstd: true})
		},
		"window over the store's bound": func(i int, r *agentv1.ChunkRead, s agentv1.Agent_ReadChunksServer) error {
			return s.Send(&agentv1.ReadChunksResponse{Index: uint32(i), Data: wide, Zstd: true})
		},
		"not zstd": func(i int, r *agentv1.ChunkRead, s agentv1.Agent_ReadChunksServer) error {
			return s.Send(&agentv1.ReadChunksResponse{Index: uint32(i), Data: data[:100], Zstd: true})
		},
		"out of order": func(i int, r *agentv1.ChunkRead, s agentv1.Agent_ReadChunksServer) error {
			return s.Send(&agentv1.ReadChunksResponse{Index: uint32(1 - i), Data: data})
		},
		"twice": func(i int, r *agentv1.ChunkRead, s agentv1.Agent_ReadChunksServer) error {
			return s.Send(&agentv1.ReadChunksResponse{Index: 0, Data: data})
		},
		"missing": func(i int, r *agentv1.ChunkRead, s agentv1.Agent_ReadChunksServer) error {
			if i == 1 {
				return nil
			}
			return s.Send(&agentv1.ReadChunksResponse{Index: uint32(i), Data: data})
		},
		"extra": func(i int, r *agentv1.ChunkRead, s agentv1.Agent_ReadChunksServer) error {
			if err := s.Send(&agentv1.ReadChunksResponse{Index: uint32(i), Data: data}); err != nil || i == 0 {
				return err
			}
			return s.Send(&agentv1.ReadChunksResponse{Index: 2, Data: data})
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := fakeAgent(t, &hostileReader{send: send})
			_, err := c.ReadChunks(context.Background(), ".", reads, frame.Auto, func(i int, p []byte) error {
				if !bytes.Equal(p, data) {
					t.Errorf("chunk %d: wrong bytes handed on", i)
				}
				return nil
			})
			if !errors.Is(err, archive.ErrDigest) {
				t.Fatalf("got %v, want ErrDigest", err)
			}
		})
	}
}

// TestScanReadChunksRoundTrip reads back a scan of a big file through
// the public wrappers with the default params.
func TestScanReadChunksRoundTrip(t *testing.T) {
	c, ws := inProcess(t)
	data := make([]byte, 3<<20)
	rand.NewChaCha8([32]byte{2}).Read(data)
	if err := os.WriteFile(filepath.Join(ws, "big"), data, 0o640); err != nil {
		t.Fatal(err)
	}
	es := scanAll(t, c, ".", nil)
	if len(es) != 1 || fs.FileMode(es[0].Mode) != 0o640 || len(es[0].Chunks) < 3<<20/cdc.Default().Max {
		t.Fatalf("scan: %v", es)
	}
	var got []byte
	if _, err := c.ReadChunks(context.Background(), "", readsOf(es), frame.Auto, func(_ int, p []byte) error {
		got = append(got, p...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read back differs")
	}
}
