package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
)

const (
	// DefaultStateRoot holds one directory per lab driven by hand (meshlab). It must be visible at
	// the same path inside every machine, so it is under none of the paths a machine overlays
	// (/etc, /usr/local, /var/lib) nor under /run, which a machine replaces with its own tmpfs.
	DefaultStateRoot = "/var/tmp/meshlab"
	// Prefix starts the name of every namespace the lab creates.
	Prefix = "ml"
	// Underlay is the network every lab machine is on, and nothing else.
	Underlay = "198.51.100.0/24"
	// Underlay6 is the underlay's IPv6 network (documentation range): each machine has
	// 2001:db8:100::N beside 198.51.100.N, so a probe can call a machine over IPv6 too.
	Underlay6 = "2001:db8:100::/64"
	// BridgeName is the underlay's bridge, inside the lab's switch namespace.
	BridgeName = "ml-br0"
	// ImageName is the image every lab container runs: labsvc, imported with `docker import`.
	ImageName = "meshlab/labsvc:latest"
	stateFile = "lab.json"
)

// Options configure a lab. The zero value is a lab named "lab" under DefaultStateRoot.
type Options struct {
	// Name is short ([a-z0-9], at most 8 characters); every namespace is ml-NAME-MACHINE.
	Name string
	// Dir is the lab's state directory (default DefaultStateRoot/NAME). Everything the lab keeps
	// on disk lives here: namespace files, overlays, Docker data roots, logs, probe records.
	Dir string
	// Labsvc is a built labsvc binary; by default the lab builds one from this module.
	Labsvc string
	// Logger receives progress; default slog.Default().
	Logger *slog.Logger
}

// Lab is a running lab bed.
type Lab struct {
	Name     string
	Dir      string
	Scenario string

	log      *slog.Logger
	mu       sync.Mutex
	st       labState
	machines []*Machine
}

type labState struct {
	Name     string         `json:"name"`
	Dir      string         `json:"dir"`
	Scenario string         `json:"scenario"`
	Switch   string         `json:"switch"`
	Created  time.Time      `json:"created"`
	Machines []MachineSpec  `json:"machines"`
	Probes   []probeRunning `json:"probes"`
	Ready    bool           `json:"ready"`
	// ReadyAt is when the scenario first served; probe summaries count from here.
	ReadyAt time.Time `json:"ready_at,omitzero"`
	// Steps are the steps of a migration walked on the lab, in order (Lab.Step).
	Steps []Step `json:"steps,omitempty"`
}

type probeRunning struct {
	ProbeSpec
	PID  int    `json:"pid"`
	File string `json:"file"`
}

// tools are the programs a lab machine uses, which the host must have.
var tools = []string{"ip", "nsenter", "unshare", "nft", "iptables", "ufw", "wg", "wg-quick", "wireguard-go", "dockerd", "docker"}

// Missing lists what this host lacks to run a lab: root, the tools the machines use,
// and /dev/net/tun for userspace WireGuard. It is empty when a lab can run.
func Missing() []string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		missing = append(missing, "/dev/net/tun")
	}
	return missing
}

// Start brings scenario sc up and returns the running lab. On error it leaves the state file in
// place so Down(o.Dir) removes whatever was created.
func Start(ctx context.Context, sc Scenario, o Options) (*Lab, error) {
	keepFDs()
	if o.Name == "" {
		o.Name = "lab"
	}
	if len(o.Name) > 8 || strings.Trim(o.Name, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		return nil, fmt.Errorf("lab name %q: want at most 8 characters of [a-z0-9]", o.Name)
	}
	if o.Dir == "" {
		o.Dir = filepath.Join(DefaultStateRoot, o.Name)
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("lab dir %s: %w", o.Dir, err)
	}
	if strings.ContainsAny(dir, ",: \t\n") {
		// The overlays' mount options are comma- and colon-separated paths.
		return nil, fmt.Errorf("lab dir %q: must not contain a comma, colon or space", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err == nil {
		return nil, fmt.Errorf("lab dir %s: %w (run `meshlab down` first)", dir, ErrLabExists)
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	l := &Lab{Name: o.Name, Dir: dir, Scenario: sc.Name, log: logger.With("lab", o.Name)}
	l.st = labState{Name: o.Name, Dir: dir, Scenario: sc.Name, Switch: l.nsName("sw"), Created: time.Now().UTC(), Machines: sc.Machines}
	began := time.Now()
	if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
		return nil, fmt.Errorf("lab dir %s: %w", dir, err)
	}
	// The state file goes first: from here on Down can find everything.
	if err := l.save(); err != nil {
		return nil, err
	}
	for _, ms := range sc.Machines {
		l.machines = append(l.machines, newMachine(l, ms))
	}
	if err := l.build(ctx, sc, o); err != nil {
		return l, err
	}
	l.mu.Lock()
	l.st.Ready = true
	l.st.ReadyAt = time.Now().UTC()
	l.mu.Unlock()
	if err := l.save(); err != nil {
		return l, err
	}
	l.log.Info("lab up", "scenario", sc.Name, "dir", dir, "took", time.Since(began).Round(time.Millisecond))
	return l, nil
}

// build raises a scenario: the switch, the machines on it, their units and the scenario's own
// steps; one sequence, since each step needs the one before it.
func (l *Lab) build(ctx context.Context, sc Scenario, o Options) error {
	var labsvcErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); labsvcErr = l.prepareLabsvc(ctx, o.Labsvc) }()

	// The namespace files live in a private bind mount, the way `ip netns` keeps /run/netns, so a
	// machine's mount namespace can be bound to a file there.
	nsdir := filepath.Join(l.Dir, "ns")
	if !isMountpoint(nsdir) {
		if _, err := run(ctx, "mount", "--bind", nsdir, nsdir); err != nil {
			return err
		}
	}
	if _, err := run(ctx, "mount", "--make-private", nsdir); err != nil {
		return err
	}
	for _, dir := range neighDirs {
		said, err := raiseNeighbourTable(dir, len(l.machines), sc.Hosts)
		if err != nil {
			return fmt.Errorf("the kernel's neighbour table (%s): %w", dir, err)
		}
		if said != "" {
			l.log.Info("raised the kernel's neighbour table for the lab's machines (host-wide, never lowered)", "dir", dir, "raised", said)
		}
	}
	if _, err := run(ctx, "ip", "netns", "add", l.st.Switch); err != nil {
		return fmt.Errorf("switch namespace: %w", err)
	}
	if _, err := run(ctx, "ip", "-n", l.st.Switch, "link", "add", BridgeName, "type", "bridge"); err != nil {
		return err
	}
	if _, err := run(ctx, "ip", "-n", l.st.Switch, "link", "set", BridgeName, "up"); err != nil {
		return err
	}
	// Each step says it starts (Options.Logger, at info): a lab takes some 20 s to raise.
	l.log.Info("raising the machines: a network namespace each, on the lab's switch", "machines", len(l.machines))
	if err := l.each(ctx, func(ctx context.Context, m *Machine) error { return m.create(ctx) }); err != nil {
		return err
	}
	if sc.Configure != nil {
		l.log.Info("configuring the scenario's machines (firewall, files, tunnel)", "scenario", sc.Name)
		if err := sc.Configure(ctx, l); err != nil {
			return fmt.Errorf("scenario %s: configure: %w", sc.Name, err)
		}
	}
	wg.Wait()
	if labsvcErr != nil {
		return labsvcErr
	}
	l.log.Info("booting the machines: their units, and a Docker engine with the service image where the scenario has one")
	if err := l.each(ctx, func(ctx context.Context, m *Machine) error {
		if err := m.Boot(ctx); err != nil {
			return err
		}
		if m.spec.Docker {
			return m.ImportImage(ctx)
		}
		return nil
	}); err != nil {
		return err
	}
	if sc.Populate != nil {
		l.log.Info("populating the machines (containers, services)", "scenario", sc.Name)
		if err := sc.Populate(ctx, l); err != nil {
			return fmt.Errorf("scenario %s: populate: %w", sc.Name, err)
		}
	}
	// Probes in the same container start together, after the containers they call exist.
	if len(sc.Probes) > 0 {
		l.log.Info("starting the probes", "probes", len(sc.Probes))
	}
	shared := map[string][]ProbeSpec{}
	var order []string
	for _, p := range sc.Probes {
		if p.Container == "" {
			if err := l.StartProbe(ctx, p); err != nil {
				return err
			}
			continue
		}
		key := p.From + "/" + p.Container
		if shared[key] == nil {
			order = append(order, key)
		}
		shared[key] = append(shared[key], p)
	}
	for _, key := range order {
		if err := l.StartContainerProbes(ctx, shared[key]); err != nil {
			return err
		}
	}
	if sc.Ready != nil {
		l.log.Info("waiting until the scenario serves")
		if err := sc.Ready(ctx, l); err != nil {
			return fmt.Errorf("scenario %s: not ready: %w", sc.Name, err)
		}
	}
	return nil
}

// each runs f on every machine at once.
func (l *Lab) each(ctx context.Context, f func(context.Context, *Machine) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(l.machines))
	for i, m := range l.machines {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(ctx, m) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Machine returns the machine named name, or nil.
func (l *Lab) Machine(name string) *Machine {
	for _, m := range l.machines {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Machines returns every machine of the lab in scenario order.
func (l *Lab) Machines() []*Machine { return append([]*Machine(nil), l.machines...) }

// Down tears the lab down (the same as Down(ctx, l.Dir)).
func (l *Lab) Down(ctx context.Context) error { return Down(ctx, l.Dir) }

// Labsvc is the labsvc binary the lab built (or was given).
func (l *Lab) Labsvc() string { return filepath.Join(l.Dir, "bin", "labsvc") }

func (l *Lab) nsName(machine string) string { return Prefix + "-" + l.Name + "-" + machine }

func (l *Lab) save() error {
	l.mu.Lock()
	b, err := json.MarshalIndent(l.st, "", "  ")
	l.mu.Unlock()
	if err != nil {
		return err
	}
	p := filepath.Join(l.Dir, stateFile)
	if err := os.WriteFile(p+".tmp", b, 0o644); err != nil {
		return fmt.Errorf("lab state %s: %w", p, err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return fmt.Errorf("lab state %s: %w", p, err)
	}
	return nil
}

// ErrLabExists is Start's error for a dir that already holds a lab.
var ErrLabExists = errors.New("already holds a lab")

// Load attaches to a lab that is running, from its state directory.
func Load(dir string) (*Lab, error) {
	keepFDs()
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("lab at %s: %w", dir, err)
	}
	var st labState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("lab state %s: %w", filepath.Join(dir, stateFile), err)
	}
	l := &Lab{Name: st.Name, Dir: st.Dir, Scenario: st.Scenario, st: st, log: slog.Default().With("lab", st.Name)}
	for _, ms := range st.Machines {
		l.machines = append(l.machines, newMachine(l, ms))
	}
	return l, nil
}

// Down removes everything the lab at dir created: probes and every process of every machine,
// the machines' namespaces and mounts, the switch, the Docker engines' cgroups and data, and the
// directory itself. It finds namespaces by the lab's prefix as well as by its state file, so it
// also cleans a lab whose driving process died halfway. Down of a lab that is gone is nil.
func Down(ctx context.Context, dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(dir); errors.Is(serr, os.ErrNotExist) {
			return nil
		}
		// A directory without a state file: nothing was created but the directory.
		return removeLabDir(ctx, dir)
	}
	if err != nil {
		return fmt.Errorf("lab state %s: %w", dir, err)
	}
	var st labState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("lab state %s: %w", filepath.Join(dir, stateFile), err)
	}
	var errs []error
	prefix := Prefix + "-" + st.Name + "-"

	// Every namespace that is the lab's: the state file's and anything with its prefix.
	names := map[string]bool{}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) {
				names[e.Name()] = true
			}
		}
	}
	inodes := map[uint64]bool{}
	for n := range names {
		if ino, err := nsInode("/run/netns/" + n); err == nil {
			inodes[ino] = true
		}
	}
	nsfiles, _ := filepath.Glob(filepath.Join(dir, "ns", "*"))
	for _, f := range nsfiles {
		if ino, err := nsInode(f); err == nil && isMountpoint(f) {
			inodes[ino] = true
		}
	}
	m := matcher{ns: inodes, roots: []string{dir + "/"}, cgroupTok: []string{}}
	for _, ms := range st.Machines {
		m.cgroupTok = append(m.cgroupTok, prefix+ms.Name)
	}
	for _, p := range st.Probes {
		if p.PID > 0 && procInDir(p.PID, dir) {
			_ = killPID(p.PID)
		}
	}
	// A systemd machine is shut down by its own supervisor first (its overlay unmounted);
	// whatever is left of it is the namespaces' and goes below.
	for _, ms := range st.Machines {
		if ms.Systemd {
			if err := sdDown(filepath.Join(dir, "machines", ms.Name)); err != nil {
				errs = append(errs, fmt.Errorf("machine %s: %w", ms.Name, err))
			}
		}
	}
	if err := killAll(ctx, m, "lab "+st.Name); err != nil {
		errs = append(errs, err)
	}
	for _, f := range nsfiles {
		if isMountpoint(f) {
			if _, err := run(ctx, "umount", f); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for n := range names {
		if _, err := run(ctx, "ip", "netns", "delete", n); err != nil {
			errs = append(errs, err)
		}
	}
	removeCgroups(prefix)
	if err := removeLabDir(ctx, dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func removeLabDir(ctx context.Context, dir string) error {
	for _, mp := range mountsUnder(dir) {
		_, _ = run(ctx, "umount", "-l", mp)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove lab dir %s: %w", dir, err)
	}
	return nil
}

// procInDir reports whether pid is still a lab process (its command line names the lab dir),
// so a recorded pid that was reused by something else is never killed.
func procInDir(pid int, dir string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), dir)
}

// removeCgroups removes the cgroups the machines' Docker engines created (cgroup parent
// ml-LAB-MACHINE), deepest first.
func removeCgroups(prefix string) {
	tops, _ := filepath.Glob("/sys/fs/cgroup/*/" + prefix + "*")
	more, _ := filepath.Glob("/sys/fs/cgroup/" + prefix + "*")
	for _, top := range append(tops, more...) {
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}

func mountsUnder(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	// Deepest first.
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

func isMountpoint(p string) bool {
	for _, mp := range mountsUnder(p) {
		if mp == p {
			return true
		}
	}
	return false
}

// prepareLabsvc puts a static labsvc binary at DIR/bin/labsvc and the image tarball next to it.
func (l *Lab) prepareLabsvc(ctx context.Context, given string) error {
	bin := l.Labsvc()
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	if given == "" {
		given = os.Getenv("MESHLAB_LABSVC")
	}
	if given != "" {
		b, err := os.ReadFile(given)
		if err != nil {
			return fmt.Errorf("labsvc binary %s: %w", given, err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			return err
		}
	} else {
		root, err := ModuleRoot()
		if err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/labsvc")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build labsvc in %s: %w: %s", root, err, out)
		}
	}
	// The image holds the one binary at /labsvc.
	tar := filepath.Join(l.Dir, "bin", "labsvc-image.tar")
	if _, err := run(ctx, "tar", "-C", filepath.Dir(bin), "-cf", tar, "labsvc"); err != nil {
		return err
	}
	return nil
}

// ModuleRoot finds the meshd module's source: MESHD_SRC, the source this package was built from,
// or the working directory's module.
func ModuleRoot() (string, error) {
	if d := os.Getenv("MESHD_SRC"); d != "" {
		return d, nil
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		d := filepath.Dir(filepath.Dir(file))
		if _, err := os.Stat(filepath.Join(d, "cmd", "labsvc")); err == nil {
			return d, nil
		}
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err == nil {
		if p := strings.TrimSpace(string(out)); p != "" && p != os.DevNull {
			return filepath.Dir(p), nil
		}
	}
	return "", errors.New("cannot find the meshd source to build labsvc (set MESHD_SRC or MESHLAB_LABSVC)")
}

func mustAddr(s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	if err != nil {
		panic(err)
	}
	return a
}

// DownAll tears down every lab on this host: those under DefaultStateRoot, those found through
// their namespace mounts (a test's lab in a temporary directory), and any namespace left with
// the lab prefix. It returns the state directories it took down.
func DownAll(ctx context.Context) ([]string, error) {
	dirs := map[string]bool{}
	if states, err := filepath.Glob(filepath.Join(DefaultStateRoot, "*", stateFile)); err == nil {
		for _, s := range states {
			dirs[filepath.Dir(s)] = true
		}
	}
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := f[4]
		for _, cand := range []string{mp, filepath.Dir(mp)} {
			if filepath.Base(cand) == "ns" {
				if _, err := os.Stat(filepath.Join(filepath.Dir(cand), stateFile)); err == nil {
					dirs[filepath.Dir(cand)] = true
				}
			}
		}
	}
	var errs []error
	var done []string
	for d := range dirs {
		if err := Down(ctx, d); err != nil {
			errs = append(errs, err)
		}
		done = append(done, d)
	}
	// Namespaces whose lab directory is gone.
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		inodes := map[uint64]bool{}
		var names []string
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), Prefix+"-") {
				if ino, err := nsInode("/run/netns/" + e.Name()); err == nil {
					inodes[ino] = true
				}
				names = append(names, e.Name())
			}
		}
		if len(names) > 0 {
			if err := killAll(ctx, matcher{ns: inodes}, "orphaned lab namespaces"); err != nil {
				errs = append(errs, err)
			}
			for _, n := range names {
				if _, err := run(ctx, "ip", "netns", "delete", n); err != nil {
					errs = append(errs, err)
				}
				removeCgroups(n)
				done = append(done, "/run/netns/"+n)
			}
		}
	}
	sort.Strings(done)
	return done, errors.Join(errs...)
}
