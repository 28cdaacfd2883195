// Command meshsim is meshd's fleet simulator: hundreds or thousands of simulated client nodes
// against three real servers, to measure what a fleet costs the servers (docs/performance.md, "A
// fleet"). See `meshsim --help`.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"meshd/fleetsim"
	"meshd/lab"
	"meshd/pki"
)

const help = `meshsim simulates a fleet of meshd client nodes against three real servers.

Each simulated node is a client as the servers see it: its own ed25519 identity, enrolled with a
join token of its own (the same signed request as meshd join), the certificate the servers
issued, a memberlist gossip member of its own on its own port, and the declaration watch on the
servers' bus. Only its machine is simulated: its host report is that of a machine of --shape
(measured: research 012's, 60 containers, 106 firewall rules, 12 synced files; lab: a bare lab
machine), with every file its declaration names written. The servers are real agents with Raft
on disk, each on a lab machine of its own (docs/lab.md), made by genesis and joined with server
tokens; the simulated nodes live in one process on a fourth lab machine.

usage:
  meshsim run [--nodes 100] [--shape measured] [--rest 30s] [--gossip lan] [--no-failover] [--json]
              [--meshd PATH] [--name fleet] [--dir DIR] [--keep]
      raise the bed, enrol the nodes and measure: enrolment (joins/s), the servers' CPU and
      memory at rest and each node's gossip bytes over --rest, meshd status --json, a module
      assigned to every node until each reports it in force, then the leader killed (a new
      leader, every declaration watch back, a module assigned after). Takes the lab down after
      unless --keep. As root.
  meshsim clients --credential FILE --hosts PREFIX --first-port PORT [--shape measured] [--gossip lan]
      the fleet's own process, which run starts on the simulator's machine: it reads one JSON
      request a line on its standard input and answers one a line (fleetsim.Request).

The same steps are the benchmarks of package fleetsim (make bench; go test -bench Fleet
./fleetsim) and, at 50 nodes, its smoke test in make test (TestFleetSmoke).

examples:
  make build && sudo bin/meshsim run --nodes 100
  sudo bin/meshsim run --nodes 1000 --rest 60s --json > fleet-1000.json
`

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Fprint(os.Stdout, help)
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = run(os.Args[2:])
	case "clients":
		err = clients(os.Args[2:])
	default:
		err = fmt.Errorf("no command %q: run or clients (meshsim --help)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshsim:", err)
		os.Exit(1)
	}
}

func flags(name, use string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: meshsim %s %s\n", name, use)
		fs.PrintDefaults()
	}
	return fs
}

func run(args []string) error {
	fs := flags("run", "[flags] (meshsim --help says what it measures)")
	nodes := fs.Int("nodes", 100, "simulated client nodes")
	shape := fs.String("shape", "measured", "what each simulated machine holds: "+strings.Join(fleetsim.ShapeNames(), ", "))
	rest := fs.Duration("rest", 30*time.Second, "the window at rest the servers' CPU and the gossip bytes are measured over")
	noFailover := fs.Bool("no-failover", false, "do not kill the leader")
	gossipProfile := fs.String("gossip", "lan", "the simulated nodes' own memberlist timers: lan (an agent's) or wan (probes every 5 s; the servers keep lan)")
	asJSON := fs.Bool("json", false, "print the figures as JSON")
	meshd := fs.String("meshd", "", "the meshd binary the servers run (default: meshd beside meshsim)")
	name := fs.String("name", "fleet", "the lab's name (at most 8 characters)")
	dir := fs.String("dir", "", "the lab's state directory (default "+lab.DefaultStateRoot+"/NAME)")
	keep := fs.Bool("keep", false, "leave the lab up after (meshlab down --name NAME takes it down)")
	_ = fs.Parse(args)
	if _, ok := fleetsim.Shapes()[*shape]; !ok {
		return fmt.Errorf("--shape %s: not one of %s", *shape, strings.Join(fleetsim.ShapeNames(), ", "))
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if *meshd == "" {
		*meshd = filepath.Join(filepath.Dir(self), "meshd")
	}
	if _, err := os.Stat(*meshd); err != nil {
		return fmt.Errorf("the servers' meshd: %w (make build puts it beside meshsim; or --meshd PATH)", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *dir == "" {
		*dir = filepath.Join(lab.DefaultStateRoot, *name)
	}
	l, err := lab.Start(ctx, fleetsim.Scenario(*nodes), lab.Options{Name: *name, Dir: *dir})
	if !*keep {
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if derr := lab.Down(dctx, *dir); derr != nil {
				fmt.Fprintln(os.Stderr, "meshsim: lab down:", derr)
			}
		}()
	}
	if err != nil {
		return fmt.Errorf("the bed's lab: %w", err)
	}
	bed, err := fleetsim.Raise(ctx, l, *meshd, self)
	if err != nil {
		return err
	}
	if err := bed.AddHosts(ctx, *nodes); err != nil {
		return err
	}
	fleet, err := bed.Clients(ctx, *shape, *gossipProfile)
	if err != nil {
		return err
	}
	defer fleet.Close()
	fig, err := fleetsim.Measure(ctx, bed, fleet, *nodes, fleetsim.MeasureOptions{Rest: *rest, NoFailover: *noFailover, Log: os.Stderr})
	fig.Shape = *shape
	if err != nil {
		return fmt.Errorf("%w\nthe fleet's log (tail):\n%s", err, bed.FleetLog(4000))
	}
	if *asJSON {
		b, _ := json.MarshalIndent(fig, "", "  ")
		fmt.Println(string(b))
		return nil
	}
	table(os.Stdout, fig)
	return nil
}

// table prints the figures, one a line.
func table(w io.Writer, f fleetsim.Figures) {
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	fmt.Fprintf(w, "fleet of %d simulated nodes (%s), report %d bytes\n", f.Nodes, f.Shape, f.Stats.ReportBytes)
	fmt.Fprintf(w, "enrolment          %.1f joins/s (%s for %d; tokens %s)\n", f.Enrol.JoinsPerSecond, ms(f.Enrol.Enrol), f.Nodes, ms(f.Enrol.Tokens))
	fmt.Fprintf(w, "servers at rest    %.2f %% of a core (busiest), %.0f MB (largest), over %s\n", f.ServerCPU, float64(f.ServerRSS)/1e6, f.Rest)
	fmt.Fprintf(w, "gossip a node      %.0f B/s out, %.0f B/s in\n", f.Traffic.OutPerNodeS, f.Traffic.InPerNodeS)
	fmt.Fprintf(w, "status --json      %s\n", ms(f.Status))
	fmt.Fprintf(w, "assign to all      in force after %s (assigns took %s)\n", ms(f.Assign.InForce), ms(f.Assign.Assigned))
	if f.Killed != "" {
		fmt.Fprintf(w, "leader %s killed   new leader after %s; %d watches back after %s; assign to all after: %s\n",
			f.Killed, ms(f.NewLeader), f.WatchesMoved, ms(f.WatchBack), ms(f.AssignAfter.InForce))
	}
	fmt.Fprintf(w, "a client's worst   %d reports of others received, %d held, %d relayed; push-pull %d B out, %d B in\n",
		f.Stats.MaxReceivedOthers, f.Stats.MaxHeldOthers, f.Stats.MaxRelayed, f.Stats.MaxStateOut, f.Stats.MaxStateIn)
}

func clients(args []string) error {
	fs := flags("clients", "--credential FILE --hosts PREFIX --first-port PORT [--shape measured]")
	credFile := fs.String("credential", "", "the operator credential the fleet makes tokens and assigns with")
	hosts := fs.String("hosts", fleetsim.Hosts.String(), "the simulated nodes' addresses, which this machine holds: node i has the (i+1)th")
	first := fs.Int("first-port", fleetsim.FirstPort, "the first node's gossip port; each next node the next")
	shape := fs.String("shape", "measured", "what each simulated machine holds: "+strings.Join(fleetsim.ShapeNames(), ", "))
	publish := fs.Duration("publish", 10*time.Second, "how often a node at rest publishes its report again (an agent's 10 s)")
	parallel := fs.Int("parallel", 8, "enrolments and assignments at once")
	profile := fs.String("gossip", "lan", "the simulated nodes' own memberlist timers: lan (an agent's) or wan (probes every 5 s, for a thousand nodes on a small machine)")
	level := fs.String("log-level", "warn", "the log's level (debug, info, warn, error), on standard error")
	wholeView := fs.Bool("whole-view", false, "the nodes read the gossip view whole each time it changed, as agents before deltas")
	cpuProfile := fs.String("cpu-profile", "", "write the fleet process's CPU profile to this file, from start to exit")
	_ = fs.Parse(args)
	if *cpuProfile != "" {
		pf, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpu-profile: %w", err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			return fmt.Errorf("--cpu-profile %s: %w", *cpuProfile, err)
		}
		defer func() { pprof.StopCPUProfile(); pf.Close() }()
	}
	sh, ok := fleetsim.Shapes()[*shape]
	if !ok {
		return fmt.Errorf("--shape %s: not one of %s", *shape, strings.Join(fleetsim.ShapeNames(), ", "))
	}
	b, err := os.ReadFile(*credFile)
	if err != nil {
		return fmt.Errorf("--credential: %w", err)
	}
	cred, err := pki.ParseCredential(b)
	if err != nil {
		return fmt.Errorf("--credential %s: %w", *credFile, err)
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	raiseFileLimit()
	prefix, err := netip.ParsePrefix(*hosts)
	if err != nil {
		return fmt.Errorf("--hosts: %w", err)
	}
	f, err := fleetsim.New(fleetsim.Options{Hosts: prefix, FirstPort: *first, Shape: sh, Credential: cred, Publish: *publish,
		Parallel: *parallel, Profile: *profile, WholeView: *wholeView, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))})
	if err != nil {
		return err
	}
	defer f.Close()
	return fleetsim.Serve(context.Background(), f, os.Stdin, os.Stdout)
}

// raiseFileLimit lifts the soft limit on open files to the hard one: each node holds a few
// sockets (its gossip's UDP and TCP, its watch's connection).
func raiseFileLimit() {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) == nil && r.Cur < r.Max {
		r.Cur = r.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
	}
}
