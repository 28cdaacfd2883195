// Command meshlab drives the lab bed by hand: the same machines, scenarios and probes the chaos
// and end-to-end tests build with package lab.
//
//	meshlab up [--scenario predecessor-ufw|predecessor-nftables|predecessor-iptables|predecessor-apps-ufw|predecessor-apps-nftables|
//	            measured|measured-incoming|realhub-ufw|...|bare] [--systemd MACHINE,...] [--name lab] [--dir DIR]
//	meshlab down [--name lab] [--dir DIR]     idempotent; also cleans a lab whose driver died
//	meshlab down --all                        every lab on the host, tests' and orphans too
//	meshlab status [--name lab] [--dir DIR]
//	meshlab exec [--name lab] MACHINE -- CMD [ARG...]
//	meshlab probes [--json] [--steps] [--name lab] [--dir DIR]
//	meshlab step [--name lab] [--dir DIR] TEXT...   a migration's next step begins: probes count per step
//	meshlab reboot|stop|boot|cutoff|restore MACHINE
//	meshlab install-agent MACHINE BINARY [-- ARG...]   meshd at /usr/local/bin/meshd, as meshd.service
//	meshlab start-service|stop-service|reload-service MACHINE UNIT
//
// A lab's state lives in DIR (default /var/tmp/meshlab/NAME).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"meshd/lab"
)

// verbs says what each verb does, for `meshlab help` and each verb's -h.
var verbs = []struct{ use, what string }{
	{"up [--scenario NAME] [--systemd MACHINE,...] [--name LAB] [--dir DIR]", "raise a lab: machines as namespaces (those named by --systemd booted by real systemd), shaped by the scenario"},
	{"down [--name LAB] [--dir DIR] | --all", "take a lab down (idempotent); --all takes down EVERY lab on this host, tests' included"},
	{"status [--json] [--name LAB] [--dir DIR]", "the lab's machines, their addresses and state"},
	{"exec [--name LAB] [--dir DIR] MACHINE -- CMD [ARG...]", "run a command on a machine (its namespaces)"},
	{"probes [--json] [--steps] [--name LAB] [--dir DIR]", "every probe's calls, failures and longest outage; --steps: per step of the migration (see step)"},
	{"step [--name LAB] [--dir DIR] TEXT...", "say that a step of the migration begins now (probes --steps counts calls and outages per step)"},
	{"reboot|stop|boot|cutoff|restore [--name LAB] [--dir DIR] MACHINE", "faults: reboot, power off/on, cut off from the underlay and back"},
	{"install-agent [--name LAB] [--dir DIR] MACHINE BINARY [-- ARG...]", "put meshd on a machine at /usr/local/bin/meshd and run it as meshd.service"},
	{"start-service|stop-service|reload-service [--name LAB] [--dir DIR] MACHINE UNIT", "start (a Type=notify unit: until it is ready), stop or reload one of a machine's units (the predecessor's control, meshd)"},
}

func usage(code int) {
	w := os.Stderr
	if code == 0 {
		w = os.Stdout
	}
	fmt.Fprintln(w, "meshlab drives the lab bed by hand (docs/lab.md walks it). usage:")
	for _, v := range verbs {
		fmt.Fprintf(w, "  meshlab %s\n      %s\n", v.use, v.what)
	}
	fmt.Fprintf(w, "scenarios: %s\n", strings.Join(lab.ScenarioNames, ", "))
	os.Exit(code)
}

// verbFlags are the flags each verb takes besides --name and --dir.
var verbFlags = map[string][]string{
	"up": {"scenario", "systemd"}, "down": {"all"}, "status": {"json"}, "probes": {"json", "steps"}, "step": nil, "exec": nil,
	"reboot": nil, "stop": nil, "boot": nil, "cutoff": nil, "restore": nil,
	"install-agent": nil, "start-service": nil, "stop-service": nil, "reload-service": nil,
}

// verbUsage prints one verb's line of the usage and the flags it takes.
func verbUsage(fs *flag.FlagSet, verb string) {
	for _, v := range verbs {
		for _, name := range strings.Split(strings.Fields(v.use)[0], "|") {
			if name == verb {
				fmt.Fprintf(fs.Output(), "usage: meshlab %s\n  %s\n", v.use, v.what)
			}
		}
	}
	fs.PrintDefaults()
}

// unknownVerb names what was asked and the verbs there are, with the nearest one.
func unknownVerb(verb string) {
	var names []string
	for _, v := range verbs {
		names = append(names, strings.Split(strings.Fields(v.use)[0], "|")...)
	}
	msg := fmt.Sprintf("meshlab: unknown command %q", verb)
	for _, n := range names {
		if strings.HasPrefix(n, verb) || strings.HasPrefix(verb, n) || editDistance(n, verb) <= 2 {
			msg += fmt.Sprintf(" (did you mean %q?)", n)
			break
		}
	}
	fmt.Fprintf(os.Stderr, "%s\ncommands: %s\n`meshlab help` describes each.\n", msg, strings.Join(names, ", "))
	os.Exit(2)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func main() {
	if len(os.Args) < 2 {
		usage(2)
	}
	switch os.Args[1] {
	case "help", "-h", "-help", "--help":
		usage(0)
	}
	verb := os.Args[1]
	takes, known := verbFlags[verb]
	if !known {
		unknownVerb(verb)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Each verb's flag set holds only its own flags: a mistyped flag shows that verb's usage.
	fs := flag.NewFlagSet("meshlab "+verb, flag.ExitOnError)
	fs.Usage = func() { verbUsage(fs, verb) }
	name := fs.String("name", "lab", "lab name")
	dir := fs.String("dir", "", "lab state directory (default "+lab.DefaultStateRoot+"/NAME)")
	scenario, asJSON, all, perStep, sdNames := new(string), new(bool), new(bool), new(bool), new(string)
	for _, f := range takes {
		switch f {
		case "scenario":
			fs.StringVar(scenario, "scenario", "predecessor-ufw", "scenario to raise: "+strings.Join(lab.ScenarioNames, ", "))
		case "systemd":
			fs.StringVar(sdNames, "systemd", "", "machines to boot by real systemd under systemd-nspawn (comma-separated, e.g. hub; the cached root scripts/labroot.sh builds)")
		case "json":
			fs.BoolVar(asJSON, "json", false, "print JSON")
		case "all":
			fs.BoolVar(all, "all", false, "every lab on this host, also tests' and orphaned ones")
		case "steps":
			fs.BoolVar(perStep, "steps", false, "per step of the migration: calls, failed calls, the longest outage and the probe that saw it")
		}
	}
	_ = fs.Parse(os.Args[2:])
	if *dir == "" {
		*dir = filepath.Join(lab.DefaultStateRoot, *name)
	}
	var err error
	switch verb {
	case "up":
		err = up(ctx, *scenario, *sdNames, *name, *dir)
	case "down":
		if *all {
			var done []string
			done, err = lab.DownAll(ctx)
			for _, d := range done {
				fmt.Printf("down: %s\n", d)
			}
			break
		}
		err = lab.Down(ctx, *dir)
		if err == nil {
			fmt.Printf("lab %s is down\n", *name)
		}
	case "status":
		err = status(*name, *dir, *asJSON)
	case "probes":
		err = probes(*name, *dir, *asJSON, *perStep)
	case "step":
		err = step(*name, *dir, fs.Args())
	case "exec":
		os.Exit(execIn(ctx, *name, *dir, fs.Args()))
	case "reboot", "stop", "boot", "cutoff", "restore":
		err = act(ctx, *name, *dir, verb, fs.Args())
	case "install-agent", "start-service", "stop-service", "reload-service":
		err = service(ctx, *name, *dir, verb, fs.Args())
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "meshlab %s: %v\n", verb, err)
		os.Exit(1)
	}
}

// load attaches to the lab named name in dir; a lab that is not there is said in words, with the
// labs that are and how to raise this one.
func load(name, dir string) (*lab.Lab, error) {
	l, err := lab.Load(dir)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return l, err
	}
	var here []string
	if entries, rerr := os.ReadDir(lab.DefaultStateRoot); rerr == nil {
		for _, e := range entries {
			if _, serr := os.Stat(filepath.Join(lab.DefaultStateRoot, e.Name(), "lab.json")); serr == nil {
				here = append(here, e.Name())
			}
		}
	}
	labs := "no lab is up on this host"
	if len(here) > 0 {
		labs = "labs up here: " + strings.Join(here, ", ")
	}
	return nil, fmt.Errorf("no lab %s (nothing at %s); %s; raise it with `meshlab up --name %s`", name, dir, labs, name)
}

func up(ctx context.Context, scenario, sdNames, name, dir string) error {
	sc, err := lab.ScenarioByName(scenario)
	if err != nil {
		return err
	}
	if sdNames != "" {
		if sc, err = sc.WithSystemd(strings.Split(sdNames, ",")...); err != nil {
			return err
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	l, err := lab.Start(ctx, sc, lab.Options{Name: name, Dir: dir})
	if errors.Is(err, lab.ErrLabExists) {
		return fmt.Errorf("lab %s is up already (its state is in %s): `meshlab down --name %s` takes it down first", name, dir, name)
	}
	if err != nil {
		return fmt.Errorf("%w (run `meshlab down --name %s` to clean up)", err, name)
	}
	fmt.Printf("lab %s up (scenario %s) in %s; state in %s\n", l.Name, l.Scenario, time.Since(start).Round(time.Millisecond), l.Dir)
	return status(name, dir, false)
}

func status(name, dir string, asJSON bool) error {
	l, err := load(name, dir)
	if err != nil {
		return err
	}
	type row struct {
		Machine    string `json:"machine"`
		Addr       string `json:"addr"`
		TunnelAddr string `json:"tunnel_addr,omitempty"`
		Netns      string `json:"netns"`
		DockerHost string `json:"docker_host,omitempty"`
		Processes  int    `json:"processes"`
	}
	var rows []row
	for _, m := range l.Machines() {
		r := row{Machine: m.Name, Addr: m.Addr.String(), Netns: m.Netns(), DockerHost: m.DockerHost(), Processes: len(m.Processes())}
		if m.TunnelAddr.IsValid() {
			r.TunnelAddr = m.TunnelAddr.String()
		}
		rows = append(rows, r)
	}
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"lab": l.Name, "scenario": l.Scenario, "dir": l.Dir, "machines": rows})
	}
	fmt.Printf("lab %s, scenario %s, dir %s\n", l.Name, l.Scenario, l.Dir)
	for _, r := range rows {
		fmt.Printf("  %-8s %-15s %-10s %3d processes  %s  %s\n", r.Machine, r.Addr, r.TunnelAddr, r.Processes, r.Netns, r.DockerHost)
	}
	return nil
}

func probes(name, dir string, asJSON, perStep bool) error {
	l, err := load(name, dir)
	if err != nil {
		return err
	}
	if perStep {
		rows, err := l.StepReport()
		if err != nil {
			return err
		}
		if asJSON {
			return json.NewEncoder(os.Stdout).Encode(rows)
		}
		return lab.WriteStepTable(os.Stdout, rows)
	}
	sums, err := l.Probes()
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(sums)
	}
	for _, s := range sums {
		fmt.Println(s)
	}
	return nil
}

func execIn(ctx context.Context, name, dir string, args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "meshlab exec: want MACHINE -- CMD [ARG...]")
		return 2
	}
	machine, cmdArgs := args[0], args[1:]
	if cmdArgs[0] == "--" {
		cmdArgs = cmdArgs[1:]
	}
	if len(cmdArgs) == 0 {
		fmt.Fprintln(os.Stderr, "meshlab exec: no command")
		return 2
	}
	l, err := load(name, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshlab exec:", err)
		return 1
	}
	m := l.Machine(machine)
	if m == nil {
		fmt.Fprintf(os.Stderr, "meshlab exec: lab %s has no machine %q\n", l.Name, machine)
		return 1
	}
	cmdArgs = passTerminal(cmdArgs, os.Environ())
	cmd := m.Command(ctx, cmdArgs[0], cmdArgs[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "meshlab exec:", err)
		return 1
	}
	return 0
}

// terminalEnv are the caller's variables a command run by exec is given: what its terminal is,
// so meshd fits its tables to it. A machine's commands start with no other of the caller's.
var terminalEnv = []string{"COLUMNS", "LINES", "TERM"}

// passTerminal is args run under env(1) with those of terminalEnv environ sets, or args as
// they are when it sets none (env, inside the machine, since its environment is set there).
func passTerminal(args, environ []string) []string {
	var set []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(terminalEnv, k) {
			set = append(set, kv)
		}
	}
	if len(set) == 0 {
		return args
	}
	return append(append([]string{"env"}, set...), args...)
}

// service installs the meshd agent on a machine (meshd's own unit, returning once the agent is
// ready), or starts, stops or reloads one of its units.
func service(ctx context.Context, name, dir, verb string, args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("want MACHINE and %s", map[bool]string{true: "BINARY", false: "UNIT"}[verb == "install-agent"])
	}
	l, err := load(name, dir)
	if err != nil {
		return err
	}
	m := l.Machine(args[0])
	if m == nil {
		return fmt.Errorf("lab %s has no machine %q", l.Name, args[0])
	}
	switch verb {
	case "install-agent":
		rest := args[2:]
		if len(rest) > 0 && rest[0] == "--" {
			rest = rest[1:]
		}
		return m.InstallAgent(ctx, args[1], rest...)
	case "start-service":
		return m.StartService(ctx, args[1])
	case "reload-service":
		return m.ReloadService(ctx, args[1])
	default:
		return m.StopService(ctx, args[1])
	}
}

func act(ctx context.Context, name, dir, verb string, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("want one MACHINE")
	}
	l, err := load(name, dir)
	if err != nil {
		return err
	}
	m := l.Machine(args[0])
	if m == nil {
		return fmt.Errorf("lab %s has no machine %q", l.Name, args[0])
	}
	switch verb {
	case "reboot":
		return m.Reboot(ctx)
	case "stop":
		return m.Stop(ctx)
	case "boot":
		return m.Boot(ctx)
	case "cutoff":
		return m.CutOff(ctx)
	case "restore":
		return m.Restore(ctx)
	}
	return nil
}

// step says that a step of the migration begins now.
func step(name, dir string, args []string) error {
	text := strings.TrimSpace(strings.Join(args, " "))
	if text == "" {
		return errors.New("want the step's text (meshlab step [--name LAB] TEXT)")
	}
	l, err := load(name, dir)
	if err != nil {
		return err
	}
	return l.Step(text)
}
