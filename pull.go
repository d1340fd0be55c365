package ferry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// Artifacts are the files a Rascal worker writes into its meta directory,
// in the order a reader wants them; meta.json is the one that must be
// there.
var Artifacts = []string{
	"meta.json", "agent.ndjson", "runner.log", "agent_output.txt",
	"commit_message.txt", "pr_body.md", "run_token_usage.json",
}

// DefaultMetaDir is where a run's artifacts live in the sandbox, relative
// to the workspace root (Rascal's /rascal-meta, remapped; rascal.md).
const DefaultMetaDir = "rascal-meta"

// ErrNoMeta means the pull found no meta.json; the other artifacts were
// still saved.
var ErrNoMeta = errors.New("ferry: no meta.json in the sandbox")

// PullResult says which artifacts were saved and which were absent.
type PullResult struct {
	Saved     []string `json:"saved"`
	Missing   []string `json:"missing"`
	Files     int64    `json:"files"`
	Bytes     int64    `json:"bytes"`
	WireBytes int64    `json:"wire_bytes"`
	Seconds   float64  `json:"seconds"`
	Mode      string   `json:"mode"`
	// RelayLost is set by a run when the channel failed after its pull
	// had placed the artifacts (see RunResult); it holds the channel's
	// error.
	RelayLost string `json:"relay_lost,omitempty"`
}

// PullSpec says where a pull's artifacts are and where they go.
type PullSpec struct {
	// MetaDir is the sandbox directory of the artifacts; ""
	// is DefaultMetaDir.
	MetaDir string
	// Out is the host directory they are saved into.
	Out string
	// Limits bound what the sandbox may send; zero fields are the
	// defaults.
	Limits archive.Limits
}

func (p PullSpec) metaDir() string {
	if p.MetaDir == "" {
		return DefaultMetaDir
	}
	return p.MetaDir
}

// Pull saves the run artifacts found in spec.MetaDir in the sandbox into
// spec.Out, each file replaced atomically (rename), after the whole
// stream has been checked. Absent optional files are listed in Missing;
// an absent meta.json is ErrNoMeta, with everything else still saved.
func Pull(ctx context.Context, sb Sandbox, spec PullSpec) (_ PullResult, err error) {
	start := time.Now()
	res := PullResult{}
	ctx, sb, idle := sb.watchIdle(ctx, fmt.Sprintf("pull from %s:%s", sb.Name, spec.metaDir()))
	defer func() { err = idle.end(err) }()
	res, err = use(ctx, sb, "pull from "+sb.Name, func(r transfer.Remote) (PullResult, error) {
		return pull(ctx, sb, r, spec)
	})
	res.Seconds = time.Since(start).Seconds()
	return res, err
}

// pull is Pull through an open remote.
func pull(ctx context.Context, sb Sandbox, r transfer.Remote, spec PullSpec) (PullResult, error) {
	metaDir, out, limits := spec.metaDir(), spec.Out, spec.Limits
	res := PullResult{Mode: r.Mode().String()}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return res, fmt.Errorf("create %s: %w", out, err)
	}
	stage, err := os.MkdirTemp(out, ".ferry-pull-")
	if err != nil {
		return res, fmt.Errorf("create staging dir: %w", err)
	}
	defer os.RemoveAll(stage)
	// Those artifacts that are files come in one download, which in agent
	// mode leaves out the rest itself: no stat of them first.
	cs, err := r.Download(ctx, transfer.DownloadSpec{Dir: metaDir, Names: Artifacts, Local: stage, Place: archive.PlaceInto, Limits: limits, FilesOnly: true})
	if err != nil {
		return res, fmt.Errorf("pull from %s:%s: %w", sb.Name, metaDir, err)
	}
	have := map[string]bool{}
	var present []string
	for _, a := range Artifacts {
		fi, err := os.Lstat(filepath.Join(stage, a))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			res.Missing = append(res.Missing, a)
			continue
		case err != nil || !fi.Mode().IsRegular():
			return res, fmt.Errorf("pull %s:%s/%s: not a regular file", sb.Name, metaDir, a)
		}
		have[a] = true
		present = append(present, a)
	}
	for _, name := range present {
		if err := os.Rename(filepath.Join(stage, name), filepath.Join(out, name)); err != nil {
			return res, fmt.Errorf("place %s: %w", filepath.Join(out, name), err)
		}
		res.Saved = append(res.Saved, name)
	}
	res.Files, res.Bytes, res.WireBytes = cs.Files, cs.Bytes, cs.WireBytes
	if !have["meta.json"] {
		return res, fmt.Errorf("pull from %s:%s: %w", sb.Name, metaDir, ErrNoMeta)
	}
	return res, nil
}
