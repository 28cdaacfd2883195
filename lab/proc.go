package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is what the lab needs to know about one process to decide whether it belongs to a machine.
type proc struct {
	pid, ppid int
	zombie    bool
	netns     uint64
	mntns     uint64
	root      string
	cgroup    string
}

// nsInode returns the inode that identifies a namespace, from a bind-mounted namespace file or a
// /proc/PID/ns link.
func nsInode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

func linkInode(path string) uint64 {
	s, err := os.Readlink(path)
	if err != nil {
		return 0
	}
	i := strings.IndexByte(s, '[')
	j := strings.IndexByte(s, ']')
	if i < 0 || j < i {
		return 0
	}
	n, _ := strconv.ParseUint(s[i+1:j], 10, 64)
	return n
}

func listProcs() []proc {
	ents, _ := os.ReadDir("/proc")
	var out []proc
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// comm may hold spaces and parentheses: the fields we want follow the last ')'.
		s := string(stat)
		k := strings.LastIndexByte(s, ')')
		if k < 0 {
			continue
		}
		f := strings.Fields(s[k+1:])
		if len(f) < 2 {
			continue
		}
		p := proc{pid: pid, zombie: f[0] == "Z" || f[0] == "X"}
		p.ppid, _ = strconv.Atoi(f[1])
		if !p.zombie {
			p.netns = linkInode(filepath.Join(dir, "ns/net"))
			p.mntns = linkInode(filepath.Join(dir, "ns/mnt"))
			p.root, _ = os.Readlink(filepath.Join(dir, "root"))
			cg, _ := os.ReadFile(filepath.Join(dir, "cgroup"))
			p.cgroup = string(cg)
		}
		out = append(out, p)
	}
	return out
}

// matcher says which processes belong to a machine (or a lab): those in one of its namespaces,
// whose root lies under one of its directories (containers), whose cgroup names it, and every
// descendant of those.
type matcher struct {
	ns        map[uint64]bool
	roots     []string
	cgroupTok []string
	exclude   map[int]bool
}

func (m matcher) pids() []int {
	procs := listProcs()
	in := map[int]bool{}
	for _, p := range procs {
		if p.zombie || m.exclude[p.pid] {
			continue
		}
		if m.ns[p.netns] || m.ns[p.mntns] {
			in[p.pid] = true
			continue
		}
		for _, r := range m.roots {
			if r != "" && strings.HasPrefix(p.root, r) {
				in[p.pid] = true
			}
		}
		for _, t := range m.cgroupTok {
			if t != "" && strings.Contains(p.cgroup, "/"+t+"/") {
				in[p.pid] = true
			}
		}
	}
	// Descendants, to a fixed point.
	for changed := true; changed; {
		changed = false
		for _, p := range procs {
			if !p.zombie && !in[p.pid] && in[p.ppid] && !m.exclude[p.pid] {
				in[p.pid] = true
				changed = true
			}
		}
	}
	out := make([]int, 0, len(in))
	for pid := range in {
		out = append(out, pid)
	}
	return out
}

// killAll kills every process the matcher finds, again and again, until none is left.
func killAll(ctx context.Context, m matcher, what string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		pids := m.pids()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: processes still alive after SIGKILL: %v", what, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// run runs a host command and returns its combined output; the error names the command.
func run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = machineEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// machineEnv is the environment every command in a machine starts with: nothing of the caller's,
// above all no DOCKER_HOST, so a machine's tools find the machine's own engine.
func machineEnv() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root",
		"LANG=C.UTF-8",
	}
}
