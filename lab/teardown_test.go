package lab

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/internal/testenv"
)

// hostListing is what exists on the host that a lab could leave behind: namespaces, processes,
// mounts, interfaces, unix sockets, cgroups, and who holds which namespace.
type hostListing struct {
	items map[string]string // kind:id -> detail
}

func listHost(t *testing.T) hostListing {
	t.Helper()
	h := hostListing{items: map[string]string{}}
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			h.items["netns:"+e.Name()] = ""
		}
	}
	for _, p := range listProcs() {
		if p.zombie {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
		h.items["proc:"+strconv.Itoa(p.pid)] = fmt.Sprintf("%s net:[%d] mnt:[%d] root=%s", strings.ReplaceAll(string(cmd), "\x00", " "), p.netns, p.mntns, p.root)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			h.items["mount:"+f[4]] = line
		}
	}
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	for _, line := range strings.Split(string(links), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			h.items["link:"+strings.TrimSuffix(strings.Split(f[1], "@")[0], ":")] = line
		}
	}
	unix, _ := os.ReadFile("/proc/net/unix")
	for _, line := range strings.Split(string(unix), "\n") {
		if f := strings.Fields(line); len(f) >= 8 && strings.HasPrefix(f[7], "/") {
			h.items["socket:"+f[7]] = ""
		}
	}
	cg, _ := filepath.Glob("/sys/fs/cgroup/*/" + Prefix + "-*")
	for _, c := range cg {
		h.items["cgroup:"+c] = ""
	}
	return h
}

// leftovers lists what is in after and not in before and belongs to the lab: it names the lab
// (its directory or its namespace prefix) or holds one of the lab's namespaces.
func leftovers(before, after hostListing, dir, prefix string, inodes map[uint64]bool) (ours, others []string) {
	var keys []string
	for k := range after.items {
		if _, ok := before.items[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		entry := k + " " + after.items[k]
		mine := strings.Contains(entry, dir) || strings.Contains(entry, prefix)
		for ino := range inodes {
			if strings.Contains(entry, fmt.Sprintf("[%d]", ino)) || strings.Contains(entry, fmt.Sprintf(":%d ", ino)) {
				mine = true
			}
		}
		if mine {
			ours = append(ours, entry)
		} else {
			others = append(others, entry)
		}
	}
	return ours, others
}

// labInodes are the inodes of every namespace the lab at dir holds now.
func labInodes(dir, prefix string) map[uint64]bool {
	inodes := map[uint64]bool{}
	files, _ := filepath.Glob(filepath.Join(dir, "ns", "*"))
	ns, _ := filepath.Glob("/run/netns/" + prefix + "*")
	for _, f := range append(files, ns...) {
		if isMountpoint(f) || strings.HasPrefix(f, "/run/netns/") {
			if ino, err := nsInode(f); err == nil {
				inodes[ino] = true
			}
		}
	}
	return inodes
}

// nsHolders lists processes and mounts that still hold one of the given namespaces.
func nsHolders(inodes map[uint64]bool) []string {
	var out []string
	for _, p := range listProcs() {
		if p.zombie {
			continue
		}
		for _, k := range []string{"net", "mnt", "uts"} {
			if ino := linkInode(fmt.Sprintf("/proc/%d/ns/%s", p.pid, k)); inodes[ino] {
				out = append(out, fmt.Sprintf("pid %d holds %s:[%d]", p.pid, k, ino))
			}
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		for ino := range inodes {
			if strings.Contains(line, fmt.Sprintf("[%d]", ino)) {
				out = append(out, "mount holds it: "+line)
			}
		}
	}
	return out
}

// checkNothingLeft compares the host after teardown with before the lab. during is the host (and
// the holders of the lab's namespaces) just before teardown: a namespace's inode number is reused
// once it is freed, so another test's namespace made after teardown may carry one of the lab's old
// numbers; an entry is the lab's by its number only if it already held it while the lab was up.
func checkNothingLeft(t *testing.T, before, during hostListing, duringHolders []string, dir, prefix string, inodes map[uint64]bool) {
	t.Helper()
	after := listHost(t)
	ours, others := leftovers(before, after, dir, prefix, inodes)
	for _, o := range ours {
		k, v, _ := strings.Cut(o, " ")
		named := strings.Contains(o, dir) || strings.Contains(o, prefix)
		if d, ok := during.items[k]; !named && (!ok || d != v) {
			others = append(others, o)
			continue
		}
		t.Errorf("left behind: %s", o)
	}
	held := map[string]bool{}
	for _, h := range duringHolders {
		held[h] = true
	}
	for _, h := range nsHolders(inodes) {
		if held[h] {
			t.Errorf("a lab namespace is still alive: %s", h)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("lab directory %s (docker data, overlays, sockets) still exists", dir)
	}
	if len(others) > 0 {
		t.Logf("%d new entries on the host that are not the lab's (other tests running alongside), e.g. %q", len(others), others[0])
	}
}

func TestTeardownLeavesNothing(t *testing.T) {
	testenv.Require(t, "lab", Missing()...)
	ctx := testenv.Context(t, 4*time.Minute)

	t.Run("a full lab, torn down twice", func(t *testing.T) {
		name := "t" + randomHex()
		dir := labTempDir(t)
		prefix := Prefix + "-" + name + "-"
		before := listHost(t)
		l, err := Start(ctx, Predecessor(FirewallNftables), Options{Name: name, Dir: dir})
		if err != nil {
			_ = Down(ctx, dir)
			t.Fatal(err)
		}
		inodes := labInodes(dir, prefix)
		if len(inodes) != 2*len(l.Machines())+len(l.Machines())+1 {
			t.Logf("lab holds %d namespaces", len(inodes))
		}
		during := listHost(t)
		duringHolders := nsHolders(inodes)
		ours, _ := leftovers(before, during, dir, prefix, inodes)
		t.Logf("the lab created %d things on the host while up, e.g. %q", len(ours), ours[:min(3, len(ours))])
		if err := Down(ctx, dir); err != nil {
			t.Fatalf("down: %v", err)
		}
		if err := Down(ctx, dir); err != nil {
			t.Errorf("second down: %v", err)
		}
		checkNothingLeft(t, before, during, duringHolders, dir, prefix, inodes)
	})

	t.Run("a lab whose driving process died", func(t *testing.T) {
		name := "t" + randomHex()
		dir := labTempDir(t)
		prefix := Prefix + "-" + name + "-"
		bin := filepath.Join(t.TempDir(), "meshlab")
		root, err := ModuleRoot()
		if err != nil {
			t.Fatal(err)
		}
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/meshlab")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build meshlab: %v\n%s", err, out)
		}
		before := listHost(t)
		up := exec.CommandContext(ctx, bin, "up", "--scenario", "predecessor-ufw", "--name", name, "--dir", dir)
		up.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := up.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill the driver in the middle: once the hub's engine answers, before the lab is ready.
		sock := filepath.Join(dir, "machines", "hub", "docker.sock")
		if err := testenv.Poll(t, 60*time.Second, func() error {
			_, err := os.Stat(sock)
			return err
		}); err != nil {
			_ = up.Process.Kill()
			_ = up.Wait()
			_ = Down(ctx, dir)
			t.Fatalf("hub engine never started: %v", err)
		}
		inodes := labInodes(dir, prefix)
		_ = syscall.Kill(-up.Process.Pid, syscall.SIGKILL)
		_ = up.Wait()
		time.Sleep(500 * time.Millisecond) // let in-flight children of the dead driver start or die
		for k, v := range labInodes(dir, prefix) {
			inodes[k] = v
		}
		during := listHost(t)
		duringHolders := nsHolders(inodes)
		out, err := exec.CommandContext(ctx, bin, "down", "--name", name, "--dir", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("meshlab down after the driver died: %v\n%s", err, out)
		}
		out, err = exec.CommandContext(ctx, bin, "down", "--name", name, "--dir", dir).CombinedOutput()
		if err != nil {
			t.Errorf("second meshlab down: %v\n%s", err, out)
		}
		checkNothingLeft(t, before, during, duringHolders, dir, prefix, inodes)
	})
}

// labTempDir is a fresh directory for a lab (t.TempDir's names may hold commas, which the
// overlays' mount options cannot).
func labTempDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "meshlab-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return filepath.Join(d, "lab")
}

// randomHex is six random hex digits, for a lab name of the test's own.
func randomHex() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
