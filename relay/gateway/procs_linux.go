package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// sandboxIDVar marks every process a sandbox starts, so that the sweep
// that backs up its cgroup (or stands in for one) can find them.
const sandboxIDVar = "FERRY_SANDBOX_ID"

// procsStopTimeout bounds how long a stop or delete waits for a
// sandbox's processes to be gone once they are killed.
const procsStopTimeout = 5 * time.Second

// sandboxProcs ends every process a sandbox started, as upstream's
// driver does by deleting the sandbox's pod or container, including the
// ones that left the exec's process group or session (setsid, a
// daemon's double fork, ferry's own agent supervisor).
//
// Each sandbox gets a cgroup v2 of its own, created on its first process,
// and every exec and SSH process is cloned straight into it
// (CLONE_INTO_CGROUP, so that nothing it forks can start outside), and
// its descendants stay in it whatever they do with sessions, groups or
// their environment. Ending the sandbox writes cgroup.kill, which the
// kernel applies to every member, and waits for the cgroup to empty. The
// cgroup outlives the gateway process, so a later gateway still ends
// what an earlier one's sandbox left running.
//
// Where no cgroup v2 hierarchy is writable (not root, or v1 only) the
// gateway falls back on the FERRY_SANDBOX_ID=<id> variable every sandbox
// process starts with: a sweep of /proc/*/environ kills each process that
// carries it. A process that execs itself with a scrubbed environment
// escapes that sweep, which is why it is only the fallback; it also runs
// after the cgroup kill, for a root process that moved itself out of its
// cgroup.
//
// A subreaper (PR_SET_CHILD_SUBREAPER) was the other option: it is
// process-wide, so every orphan of anything the gateway's host process
// runs would become the gateway's to reap, and reaping them (wait on any
// pid) would race os/exec's own Wait for the children it tracks.
type sandboxProcs struct {
	// root holds one cgroup per sandbox, named by its id; "" when cgroups
	// are unavailable.
	root string
	log  *slog.Logger
}

func newSandboxProcs(disable bool, log *slog.Logger) *sandboxProcs {
	p := &sandboxProcs{log: log}
	if disable {
		return p
	}
	root, err := cgroupRoot()
	if err != nil {
		log.Info("sandbox processes are tracked by environment only", "reason", err)
		return p
	}
	p.root = root
	return p
}

// cgroupRoot finds (and creates) the directory the gateway's per-sandbox
// cgroups go in: ferry-sandboxes under the gateway's own cgroup, which it
// may create children in without touching anyone else's. It fails unless
// the kernel has cgroup.kill (Linux 5.14) and the directory is writable.
func cgroupRoot() (string, error) {
	mnt, mroot, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read own cgroup: %w", err)
	}
	var own string
	found := false
	for _, line := range strings.Split(string(self), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			own, found = rest, true
		}
	}
	if !found {
		return "", errors.New("no cgroup v2 membership")
	}
	rel, err := filepath.Rel(mroot, own)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("own cgroup %s is outside the mounted hierarchy %s", own, mroot)
	}
	root := filepath.Join(mnt, rel, "ferry-sandboxes")
	if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("create cgroup: %w", err)
	}
	// A probe child proves both that children can be made here and that
	// they can be killed as a whole.
	probe := filepath.Join(root, "probe-"+uuid())
	if err := os.Mkdir(probe, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("create cgroup: %w", err)
	}
	defer os.Remove(probe)
	if _, err := os.Stat(filepath.Join(probe, "cgroup.kill")); err != nil {
		return "", fmt.Errorf("cgroup.kill unsupported: %w", err)
	}
	return root, nil
}

// cgroup2Mount returns where the cgroup v2 hierarchy is mounted and the
// hierarchy path that mount shows.
func cgroup2Mount() (mountpoint, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		fs := strings.Fields(pre)
		if len(fs) < 5 {
			continue
		}
		if slices.Contains(strings.Split(fs[5], ","), "ro") {
			return "", "", fmt.Errorf("cgroup2 at %s is read-only", fs[4])
		}
		return fs[4], fs[3], nil
	}
	if err := sc.Err(); err != nil {
		return "", "", fmt.Errorf("read mounts: %w", err)
	}
	return "", "", errors.New("no cgroup2 mount")
}

// dir is sandbox id's cgroup directory.
func (p *sandboxProcs) dir(id string) string { return filepath.Join(p.root, id) }

// open returns an open descriptor of sandbox id's cgroup, created if need
// be, to clone a process into; nil when cgroups are unavailable. Each
// spawn opens its own and closes it once the process has started, so
// that a descriptor number never outlives the file it named (a reused
// number could name another sandbox's cgroup).
func (p *sandboxProcs) open(id string) (*os.File, error) {
	if p.root == "" {
		return nil, nil
	}
	d := p.dir(id)
	if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create sandbox cgroup: %w", err)
	}
	f, err := os.OpenFile(d, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open sandbox cgroup: %w", err)
	}
	return f, nil
}

// end kills every process of sandbox id and returns once they are gone or
// d has passed; the error names those still alive then. Its execs must
// have ended first, or one may start a process after the kill.
func (p *sandboxProcs) end(id string, d time.Duration) error {
	deadline := time.Now().Add(d)
	var errs []error
	if p.root != "" {
		if err := p.killCgroup(id, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	if left := sweepMarked(id, deadline); len(left) > 0 {
		errs = append(errs, fmt.Errorf("sandbox %s: processes %v still alive after %v", id, left, d))
	}
	return errors.Join(errs...)
}

// killCgroup kills every member of sandbox id's cgroup, waits for it to
// empty, and removes it.
func (p *sandboxProcs) killCgroup(id string, deadline time.Time) error {
	d := p.dir(id)
	if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for {
		if err := os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("kill sandbox %s cgroup: %w", id, err)
		}
		populated, err := cgroupPopulated(d)
		if err != nil {
			return err
		}
		if !populated {
			// rmdir fails (EBUSY) if a process got in since; kill again.
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				return nil
			}
			if !errors.Is(err, unix.EBUSY) {
				return fmt.Errorf("remove sandbox %s cgroup: %w", id, err)
			}
		}
		if time.Now().After(deadline) {
			procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			return fmt.Errorf("sandbox %s: processes %v still alive after kill", id, strings.Fields(string(procs)))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cgroupPopulated reports whether cgroup dir (or a descendant) still has
// a live process. A killed process leaves it as it exits, before it is
// reaped.
func cgroupPopulated(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, fmt.Errorf("read cgroup events: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return v != "0", nil
		}
	}
	return false, fmt.Errorf("cgroup events of %s: no populated line", dir)
}

// release removes sandbox id's cgroup if it is empty, as the gateway
// closes; one with processes stays, so that a later gateway can still end
// them when the sandbox is stopped or deleted.
func (p *sandboxProcs) release(id string) {
	if p.root != "" {
		_ = os.Remove(p.dir(id))
	}
}

// sweepMarked kills every process whose environment carries sandbox id's
// marker until a pass finds none, and returns the pids still alive at the
// deadline. Each is signalled through a pidfd opened before its
// environment is read, so a pid reused in between is never signalled.
func sweepMarked(id string, deadline time.Time) []int {
	marker := []byte(sandboxIDVar + "=" + id)
	self := os.Getpid()
	for {
		var alive []int
		for _, pid := range listPids() {
			if pid == self {
				continue
			}
			fd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				continue
			}
			if marked(pid, marker) {
				if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err == nil {
					alive = append(alive, pid)
					awaitPidfd(fd, deadline)
				}
			}
			unix.Close(fd)
		}
		if len(alive) == 0 || time.Now().After(deadline) {
			return alive
		}
	}
}

// marked reports whether process pid's initial environment has marker.
func marked(pid int, marker []byte) bool {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for _, kv := range bytes.Split(env, []byte{0}) {
		if bytes.Equal(kv, marker) {
			return true
		}
	}
	return false
}

// awaitPidfd waits until the process behind fd has exited (the pidfd
// polls readable) or deadline has passed.
func awaitPidfd(fd int, deadline time.Time) {
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		if err == unix.EINTR {
			continue
		}
		if n != 0 || err != nil {
			return
		}
	}
}

// listPids returns the pids in /proc.
func listPids() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// startInSandbox starts c in sandbox id's cgroup, when there is one.
func (s *Server) startInSandbox(c *exec.Cmd, id string) error {
	cgroup, err := s.procs.open(id)
	if err != nil {
		return err
	}
	if cgroup != nil {
		defer cgroup.Close()
		c.SysProcAttr.UseCgroupFD = true
		c.SysProcAttr.CgroupFD = int(cgroup.Fd())
	}
	return c.Start()
}
