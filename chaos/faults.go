package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"meshd/host/pass"
	"meshd/lab"
)

// FaultKind names a fault the injector can cause.
type FaultKind string

// The faults. Each is made of the lab's own primitives (lab.Machine's Stop, Boot, Reboot, CutOff,
// Restore, StopService, StartService) or of a signal to the agent's process group.
const (
	// FaultKill: SIGKILL the machine's agent (its unit's process group), then start it again.
	FaultKill FaultKind = "kill"
	// FaultStop: power the machine off (every process killed, kernel state and /run lost), keep
	// it off for a while, then boot it (its enabled units, the agent among them, start again).
	FaultStop FaultKind = "stop"
	// FaultReboot: stop and boot at once.
	FaultReboot FaultKind = "reboot"
	// FaultCut: unplug the machine from the underlay, then plug it back.
	FaultCut FaultKind = "cut"
	// FaultPartition: one server drops everything from and to the other two servers (an
	// nftables table of its own, in the server's network namespace), then the table goes.
	FaultPartition FaultKind = "partition"
	// FaultCrash: restart the agent armed to SIGKILL itself at a named crash point
	// (pass.CrashEnv); once it died there, or the hold ended, start it again unarmed.
	FaultCrash FaultKind = "crash"
)

// CrashPoints are the named points a FaultCrash arms: inside a hold, a take (of a file and of a
// container), an unassign, a flip, a return and a tunnel takeover (see package host's doc).
var CrashPoints = []string{
	"hold.before-record-original", "hold.after-record-original",
	"take.before-record-original", "take.after-record-original", "take.after-record-written",
	"take.after-temp-write", "take.after-rename", "take.after-dir-sync",
	"take.before-record-latest", "take.after-record-latest", "take.before-write-files",
	"take.container.after-prepare", "take.container.after-record-cutover", "take.container.after-stop",
	"take.container.after-move-aside", "take.container.after-move-new",
	"unassign.after-remove",
	"flip.after-filter", "flip.before-retire", "flip.after-retire",
	"return.after-restore", "return.after-guard",
	"tunnel.after-seal-key", "tunnel.after-record-takeover", "tunnel.after-stop-found", "tunnel.after-takeover",
}

// Fault is one fault as it happened: what, where, when it began and healed (on the history's
// clock), and what went wrong injecting or healing it.
type Fault struct {
	Kind    FaultKind `json:"kind"`
	Machine string    `json:"machine"`
	Point   string    `json:"point,omitempty"`   // FaultCrash's crash point
	Crashed bool      `json:"crashed,omitempty"` // FaultCrash: the agent reached its point
	From    []string  `json:"from,omitempty"`    // FaultPartition: the servers cut from
	Hold    string    `json:"hold"`              // how long it lasted
	Begin   int64     `json:"begin_ns"`          // since the history began
	Healed  int64     `json:"healed_ns"`         //
	Err     string    `json:"error,omitempty"`   //
	Back    string    `json:"back,omitempty"`    // a reboot/stop: how long the guard took to return after the agent started
	Detail  string    `json:"detail,omitempty"`  //
	// Aim says the fault waits for the migration's next step and strikes the node that step acts
	// on (a crash at a point of what the step does); AimedAt names the step it struck, "" when
	// none came and it struck the machine drawn.
	Aim     bool   `json:"aim,omitempty"`
	AimedAt string `json:"aimed_at,omitempty"`
	// Skipped says why the fault did nothing (p1 not enrolled yet, for a fault on its agent).
	Skipped string `json:"skipped,omitempty"`

	pick  int           // the draw that picks the crash point among the aimed step's
	lag   time.Duration // an aimed fault (not a crash): how long after the step's command it lands
	armed chan struct{} // an aimed crash: closed once the agent runs armed (the step then sends its command)
}

func (f Fault) String() string {
	s := fmt.Sprintf("%s %s", f.Kind, f.Machine)
	if f.Point != "" {
		s += " at " + f.Point
		if f.Crashed {
			s += " (crashed there)"
		} else {
			s += " (not reached)"
		}
	}
	if len(f.From) > 0 {
		s += " from " + strings.Join(f.From, ",")
	}
	s += " for " + f.Hold
	if f.AimedAt != "" {
		s += " (aimed at " + f.AimedAt + ")"
	}
	if f.Skipped != "" {
		s += " (skipped: " + f.Skipped + ")"
	}
	if f.Err != "" {
		s += ": " + f.Err
	}
	return s
}

// Injector causes faults on the machines of a lab running meshd agents as meshd.service.
type Injector struct {
	Lab *lab.Lab
	// Servers are the Raft servers' machines (a partition isolates one of them from the others).
	Servers []string
	// AgentArgs are the agent's arguments on machine (without the crash point's environment),
	// run under meshd's own unit.
	AgentArgs func(machine string) []string
	// Provoke, when set, is called (in its own goroutine) once a crash fault's agent is armed:
	// it sends the command that leads the agent to the point.
	Provoke func(ctx context.Context, f Fault)
	// Ready, when set, says whether a machine runs an agent faults may act on (p1 only once the
	// workload enrolled it); a crash fault waits up to its hold for it, and is skipped if not.
	Ready func(machine string) bool

	provoking sync.WaitGroup
}

// Wait waits for every command a crash fault provoked to be answered.
func (in *Injector) Wait() { in.provoking.Wait() }

func (in *Injector) machine(name string) (*lab.Machine, error) {
	m := in.Lab.Machine(name)
	if m == nil {
		return nil, fmt.Errorf("no lab machine %q", name)
	}
	return m, nil
}

// KillAgent SIGKILLs the agent on machine: its unit's process group, at once, no SIGTERM.
func (in *Injector) KillAgent(ctx context.Context, machine string) error {
	m, err := in.machine(machine)
	if err != nil {
		return err
	}
	pidFile := filepath.Join(m.Dir(), "units", "meshd.service.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return fmt.Errorf("%s: the agent's pid file: %w", machine, err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		return fmt.Errorf("%s: bad pid file %s", machine, pidFile)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	if err := waitGone(ctx, pid); err != nil {
		return fmt.Errorf("%s: agent pid %d: %w", machine, pid, err)
	}
	return os.Remove(pidFile)
}

// StartAgent starts the agent unit (meshd's own, Type=notify) on machine, armed at point when
// point is not "". Unarmed, it returns once the agent is ready (READY=1); armed, at once, as
// `systemctl start --no-block`: the agent may die at its point before it is ready.
func (in *Injector) StartAgent(ctx context.Context, machine, point string) error {
	m, err := in.machine(machine)
	if err != nil {
		return err
	}
	var env []string
	if point != "" {
		env = append(env, pass.CrashEnv+"="+point)
	}
	if err := m.SetAgentUnit(ctx, env, in.AgentArgs(machine)...); err != nil {
		return err
	}
	if point != "" {
		return m.StartServiceNoBlock(ctx, "meshd")
	}
	return m.StartService(ctx, "meshd")
}

// AgentRunning says whether the agent unit's process is alive on machine.
func (in *Injector) AgentRunning(machine string) bool {
	m := in.Lab.Machine(machine)
	if m == nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join(m.Dir(), "units", "meshd.service.pid"))
	if err != nil {
		return false
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid > 0 && alive(pid)
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	k := strings.LastIndexByte(s, ')')
	return !(k > 0 && len(s) > k+2 && (s[k+2] == 'Z' || s[k+2] == 'X'))
}

func waitGone(ctx context.Context, pid int) error {
	for alive(pid) {
		select {
		case <-ctx.Done():
			return errors.New("still running")
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// partitionTable is the nftables table a partition loads on the isolated server.
const partitionTable = "chaos_partition"

// Partition isolates server machine from the servers in from: its own table drops every packet
// from and to their underlay addresses, both directions, before anything else sees them.
func (in *Injector) Partition(ctx context.Context, machine string, from []string) error {
	m, err := in.machine(machine)
	if err != nil {
		return err
	}
	var addrs []string
	for _, f := range from {
		fm, err := in.machine(f)
		if err != nil {
			return err
		}
		addrs = append(addrs, fm.Addr.String())
	}
	set := strings.Join(addrs, ", ")
	script := fmt.Sprintf(`table ip %[1]s {
  chain in { type filter hook prerouting priority -300; policy accept; ip saddr { %[2]s } drop; }
  chain out { type filter hook output priority -300; policy accept; ip daddr { %[2]s } drop; }
}
`, partitionTable, set)
	cmd := m.Command(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: load %s: %w: %s", machine, partitionTable, err, out)
	}
	return nil
}

// Heal removes a partition (a machine stopped since has lost it already).
func (in *Injector) Heal(ctx context.Context, machine string) error {
	m, err := in.machine(machine)
	if err != nil {
		return err
	}
	out, err := m.Exec(ctx, "nft", "delete", "table", "ip", partitionTable)
	if err != nil && !strings.Contains(out, "No such file") {
		return err
	}
	return nil
}

// Inject causes f (Kind, Machine, Point), holds it for hold, then heals it; it fills in the rest
// of f. now is the history's clock.
func (in *Injector) Inject(ctx context.Context, f *Fault, hold time.Duration, now func() time.Duration) {
	f.Hold = hold.String()
	f.Begin = int64(now())
	defer func() { f.Healed = int64(now()) }()
	fail := func(err error) {
		if err != nil && f.Err == "" {
			f.Err = err.Error()
		}
	}
	m, err := in.machine(f.Machine)
	if err != nil {
		fail(err)
		return
	}
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	switch f.Kind {
	case FaultKill:
		if !in.waitReady(ctx, f.Machine, hold) {
			f.Skipped = "no agent enrolled there yet"
			return
		}
		fail(in.KillAgent(ctx, f.Machine))
		sleep(hold)
		fail(in.StartAgent(ctx, f.Machine, ""))
	case FaultStop:
		fail(m.Stop(ctx))
		sleep(hold)
		fail(m.Boot(ctx))
	case FaultReboot:
		fail(m.Reboot(ctx))
	case FaultCut:
		fail(m.CutOff(ctx))
		sleep(hold)
		fail(m.Restore(ctx))
	case FaultPartition:
		for _, s := range in.Servers {
			if s != f.Machine {
				f.From = append(f.From, s)
			}
		}
		fail(in.Partition(ctx, f.Machine, f.From))
		sleep(hold)
		fail(in.Heal(ctx, f.Machine))
	case FaultCrash:
		f.Crashed = in.crashAt(ctx, m, f, hold, fail)
		if !f.Crashed && !in.ready(f.Machine) {
			f.Skipped = "no agent enrolled there yet"
		}
	default:
		fail(fmt.Errorf("no fault %q", f.Kind))
	}
}

func (in *Injector) ready(machine string) bool { return in.Ready == nil || in.Ready(machine) }

// waitReady waits up to within for machine to run an agent faults may act on (Ready).
func (in *Injector) waitReady(ctx context.Context, machine string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for !in.ready(machine) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	return in.ready(machine)
}

// crashAt restarts the agent on m armed at point and waits up to hold for it to die there; then
// it starts the agent unarmed. It says whether the agent reached the point.
func (in *Injector) crashAt(ctx context.Context, m *lab.Machine, f *Fault, hold time.Duration, fail func(error)) bool {
	point := f.Point
	if f.armed != nil {
		defer func() {
			select {
			case <-f.armed:
			default:
				close(f.armed)
			}
		}()
	}
	if !in.waitReady(ctx, m.Name, hold) {
		return false // not enrolled (yet): nothing to crash
	}
	logPath := filepath.Join(m.Dir(), "log", "meshd.log")
	before := fileSize(logPath)
	if in.AgentRunning(m.Name) {
		fail(in.KillAgent(ctx, m.Name))
	}
	fail(in.StartAgent(ctx, m.Name, point))
	if f.armed != nil {
		close(f.armed) // aimed: the migration's step sends the command that leads there
	} else if in.Provoke != nil {
		in.provoking.Add(1)
		go func() {
			defer in.provoking.Done()
			// Not bound by the fault's context: the command is answered (or times out) on its own.
			in.Provoke(context.WithoutCancel(ctx), Fault{Kind: FaultCrash, Machine: m.Name, Point: point})
		}()
	}
	deadline := time.Now().Add(hold)
	for time.Now().Before(deadline) && in.AgentRunning(m.Name) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	crashed := false
	if b, err := os.ReadFile(logPath); err == nil && int64(len(b)) >= before {
		tail := string(b[before:])
		crashed = strings.Contains(tail, "crash point reached") && strings.Contains(tail, point)
	}
	if in.AgentRunning(m.Name) {
		fail(in.KillAgent(ctx, m.Name))
	} else {
		_ = os.Remove(filepath.Join(m.Dir(), "units", "meshd.service.pid"))
	}
	fail(in.StartAgent(ctx, m.Name, ""))
	return crashed
}

func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return st.Size()
}
