package wg

// The lab: machines as network namespaces, each with its own mount namespace, on a bridge that
// lives in a namespace of its own, addressed from TEST-NET-2 (198.51.100.0/24), with no route out.
//
// Why a mount namespace per machine: wgctrl finds userspace WireGuard devices through sockets in
// /var/run/wireguard, which every network namespace shares; each machine gets a tmpfs on /run and
// on /etc/wireguard (held by a sleeping "holder" process), so every machine can have its own wg0
// and its own /etc/wireguard/wg0.conf at the real paths, as the predecessor leaves them.
//
// Why the package's code runs in a helper process: setns into a mount namespace is refused to a
// multi-threaded process, and the TUN device and wireguard-go's UDP sockets belong to the network
// namespace of the thread that creates them, while Go moves goroutines between threads. So each
// machine's side of a test (Discover, Raise, Takeover, SetPeers) runs in this test binary
// re-executed under nsenter into that machine's namespaces (helperEnv set), driven by JSON lines
// on its stdin and answering on its stdout; the embedded device lives as long as that process.
// The test process itself enters a network namespace only for a single socket (listener, probe),
// with its OS thread locked.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"meshd/internal/testenv"
)

const helperEnv = "MESHD_WG_LAB_HELPER"

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "tunnel-device" { // a copy of this binary, as meshd's device
		os.Exit(runDevice(os.Args[2]))
	}
	if os.Getenv(helperEnv) == "1" {
		os.Exit(runHelper(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

func requireLab(t testing.TB) {
	t.Helper()
	missing := testenv.Missing(true, "ip", "nsenter", "unshare", "wg", "wg-quick", "wireguard-go")
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		missing = append(missing, "/dev/net/tun")
	}
	testenv.Require(t, "the WireGuard lab", missing...)
}

var labSeq atomic.Int32

type lab struct {
	t  *testing.T
	id string
	sw string // the bridge's namespace
	n  int
}

type machine struct {
	t      *testing.T
	name   string
	ns     string
	holder *exec.Cmd
	ip     string // underlay address
}

func run(t testing.TB, args ...string) string { t.Helper(); return testenv.Run(t, args...) }

func newLab(t *testing.T) *lab {
	requireLab(t)
	l := &lab{t: t, id: fmt.Sprintf("wgt%d-%d", os.Getpid()%100000, labSeq.Add(1))}
	l.sw = l.id + "-sw"
	testenv.NewNetns(t, l.sw)
	run(t, "ip", "-n", l.sw, "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", l.sw, "link", "set", "br0", "up")
	return l
}

// machine adds a machine on the underlay, 198.51.100.N/24, with no route beyond it.
func (l *lab) machine(name string) *machine {
	t := l.t
	l.n++
	m := &machine{t: t, name: name, ns: l.id + "-" + name, ip: fmt.Sprintf("198.51.100.%d", l.n)}
	testenv.NewNetns(t, m.ns)
	// every process left in the machine (a found wireguard-go daemonises) is ended by its id
	t.Cleanup(func() { m.killAll() })
	run(t, "ip", "link", "add", "eth0", "netns", m.ns, "type", "veth", "peer", "name", "v-"+name, "netns", l.sw)
	run(t, "ip", "-n", l.sw, "link", "set", "v-"+name, "master", "br0", "up")
	run(t, "ip", "-n", m.ns, "addr", "add", m.ip+"/24", "dev", "eth0")
	run(t, "ip", "-n", m.ns, "link", "set", "eth0", "up")

	m.holder = exec.Command("nsenter", "--net=/run/netns/"+m.ns, "--", "unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", "mount -t tmpfs tmpfs /run && mount -t tmpfs -o mode=0700 tmpfs /etc/wireguard && echo ready && exec sleep 1000000")
	out, err := m.holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	m.holder.Stderr = os.Stderr
	if err := m.holder.Start(); err != nil {
		t.Fatalf("starting the holder of %s: %v", name, err)
	}
	t.Cleanup(func() { m.holder.Process.Kill(); m.holder.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("holder of %s: %q %v", name, line, err)
	}
	return m
}

func (m *machine) killAll() {
	out, _ := exec.Command("ip", "netns", "pids", m.ns).Output()
	for _, f := range strings.Fields(string(out)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil && pid != m.holder.Process.Pid {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// commands are the names of the processes in the machine's network namespace.
func (m *machine) commands() []string {
	out, _ := exec.Command("ip", "netns", "pids", m.ns).Output()
	var names []string
	for _, pid := range strings.Fields(string(out)) {
		if b, err := os.ReadFile("/proc/" + pid + "/comm"); err == nil {
			names = append(names, strings.TrimSpace(string(b)))
		}
	}
	return names
}

func (m *machine) nsenter(args ...string) []string {
	return append([]string{"nsenter", "--net=/run/netns/" + m.ns, fmt.Sprintf("--mount=/proc/%d/ns/mnt", m.holder.Process.Pid), "--"}, args...)
}

// sh runs a command on the machine.
func (m *machine) sh(cmd string) string {
	m.t.Helper()
	return run(m.t, m.nsenter("sh", "-c", cmd)...)
}

// path is where the test process sees a path of the machine's.
func (m *machine) path(p string) string {
	return fmt.Sprintf("/proc/%d/root%s", m.holder.Process.Pid, p)
}

func (m *machine) writeFile(p, content string) {
	m.t.Helper()
	if err := os.WriteFile(m.path(p), []byte(content), 0o600); err != nil {
		m.t.Fatal(err)
	}
}

// wgQuickUp raises iface from /etc/wireguard/IFACE.conf the way the predecessor does: wg-quick
// with the userspace implementation, which daemonises a wireguard-go.
func (m *machine) wgQuickUp(iface string) {
	m.t.Helper()
	m.sh("WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1 wg-quick up " + iface + " 2>&1")
}

// inNS runs f on a thread in the machine's network namespace (for creating one socket).
func (m *machine) inNS(f func() error) error {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + m.ns)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		return err // the thread stays locked and dies with its goroutine
	}
	runtime.UnlockOSThread()
	return ferr
}

// serve listens on TCP port in the machine (IPv4 and IPv6) and accepts and closes every connection.
func (m *machine) serve(port int) {
	m.t.Helper()
	var ln net.Listener
	err := m.inNS(func() (err error) {
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port)) // IPv4 and IPv6
		return err
	})
	if err != nil {
		m.t.Fatalf("listening in %s: %v", m.name, err)
	}
	m.t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// dial is one probe from the machine: a TCP connection to addr that completes within timeout.
func (m *machine) dial(addr string, timeout time.Duration) bool {
	var c net.Conn
	err := m.inNS(func() (err error) {
		c, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// probe calls addr from a machine every 50 ms and keeps every success's time.
type probe struct {
	mu        sync.Mutex
	ok        []time.Time
	failures  int
	stop      chan struct{}
	done      chan struct{}
	from, dst string
}

func startProbe(t *testing.T, m *machine, addr string) *probe {
	p := &probe{stop: make(chan struct{}), done: make(chan struct{}), from: m.name, dst: addr}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			ok := m.dial(addr, 150*time.Millisecond)
			p.mu.Lock()
			if ok {
				p.ok = append(p.ok, time.Now())
			} else {
				p.failures++
			}
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *probe) close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// succeededAfter says whether a probe succeeded after t0.
func (p *probe) succeededAfter(t0 time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ok) > 0 && p.ok[len(p.ok)-1].After(t0)
}

func (p *probe) failed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failures
}

// gap is the longest time without a successful probe between the first success at or after
// from and the last success.
func (p *probe) gap(from time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var longest time.Duration
	var prev time.Time
	for _, s := range p.ok {
		if s.Before(from) {
			prev = s
			continue
		}
		if !prev.IsZero() && s.Sub(prev) > longest {
			longest = s.Sub(prev)
		}
		prev = s
	}
	return longest
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// --- the helper process ---

type helperReq struct {
	Op    string // discover, raise, takeover, setpeers, peers, close, observe
	Iface string
	Mesh  string
	Key   wgtypes.Key
	Port  int
	Addr  string
	Peers []Peer
	// Program runs the mesh's device in a process of its own (`Program tunnel-device NAME`):
	// raise, takeover and supersede start it so.
	Program string
}

type helperResp struct {
	Err   string
	Found *Found
	State State
	Peers []PeerStatus
	Stale []DeviceProcess
}

type helper struct {
	t      *testing.T
	m      *machine
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *bytes.Buffer
}

// helper starts this test binary in the machine's namespaces as the machine's meshd side.
func (m *machine) helper() *helper {
	t := m.t
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := &helper{t: t, m: m, stderr: &bytes.Buffer{}}
	h.cmd = exec.Command(m.nsenter(exe, "-test.run=^$")[0], m.nsenter(exe, "-test.run=^$")[1:]...)
	h.cmd.Env = append(os.Environ(), helperEnv+"=1")
	h.cmd.Stderr = &lockedWriter{w: h.stderr}
	if h.in, err = h.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	h.out = bufio.NewScanner(out)
	h.out.Buffer(make([]byte, 1<<20), 1<<20)
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("starting the helper in %s: %v", m.name, err)
	}
	t.Cleanup(func() {
		h.in.Close() // the helper closes its interface and exits on EOF
		done := make(chan struct{})
		go func() { h.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			h.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("helper in %s said:\n%s", m.name, h.stderr.String())
		}
	})
	return h
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (h *helper) call(req helperReq) helperResp {
	h.t.Helper()
	b, _ := json.Marshal(req)
	if _, err := h.in.Write(append(b, '\n')); err != nil {
		h.t.Fatalf("helper in %s: %v", h.m.name, err)
	}
	if !h.out.Scan() {
		h.t.Fatalf("helper in %s ended: %v\n%s", h.m.name, h.out.Err(), h.stderr.String())
	}
	var resp helperResp
	if err := json.Unmarshal(h.out.Bytes(), &resp); err != nil {
		h.t.Fatalf("helper in %s: %v", h.m.name, err)
	}
	return resp
}

// must is call, failing the test on the helper's error.
func (h *helper) must(req helperReq) helperResp {
	h.t.Helper()
	resp := h.call(req)
	if resp.Err != "" {
		h.t.Fatalf("%s in %s: %s", req.Op, h.m.name, resp.Err)
	}
	return resp
}

// runHelper is the machine's side: it serves requests until its stdin closes, then closes the
// interface it raised.
func runHelper(in io.Reader, out io.Writer) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var iface *Interface
	defer func() {
		if iface != nil {
			iface.Close()
		}
	}()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	enc := json.NewEncoder(out)
	for sc.Scan() {
		var req helperReq
		var resp helperResp
		err := json.Unmarshal(sc.Bytes(), &req)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err == nil {
			switch req.Op {
			case "discover":
				resp.Found, err = Discover(req.Iface, "")
			case "raise":
				cfg := Config{Name: req.Mesh, PrivateKey: req.Key, ListenPort: req.Port, Peers: req.Peers, Logger: log,
					Spawn: req.spawn()}
				if cfg.Address, err = netip.ParsePrefix(req.Addr); err == nil {
					iface, err = Raise(ctx, cfg)
				}
			case "takeover":
				var f *Found
				var cfg Config
				if f, err = Discover(req.Iface, ""); err == nil {
					if cfg, err = TakeoverConfig(f, req.Mesh); err == nil {
						cfg.Logger, cfg.Spawn = log, req.spawn()
						resp.State, iface, err = Takeover(ctx, f, cfg)
					}
				}
			case "supersede":
				iface, resp.Stale, err = supersede(ctx, req, log)
			case "release":
				if iface != nil {
					iface.Release()
					iface = nil
				}
			case "setpeers":
				err = iface.SetPeers(req.Peers)
			case "peers":
				resp.Peers, err = iface.Peers()
			case "close":
				if iface != nil {
					err = iface.Close()
					iface = nil
				}
			case "observe":
				resp.State = Observe(req.Iface, req.Mesh)
			default:
				err = fmt.Errorf("unknown op %q", req.Op)
			}
		}
		cancel()
		if err != nil {
			resp.Err = err.Error()
		}
		if err := enc.Encode(resp); err != nil {
			return 1
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return 1
	}
	return 0
}

func execCommand(args ...string) *exec.Cmd { return exec.Command(args[0], args[1:]...) }
