// Command meshlab drives the lab bed by hand: the same machines, scenarios and probes the chaos
// and end-to-end tests build with package lab.
//
//	meshlab up [--scenario predecessor-ufw|predecessor-nftables|predecessor-apps-ufw|predecessor-apps-nftables|
//	            measured|measured-incoming|bare] [--name lab] [--dir DIR]
//	meshlab down [--name lab] [--dir DIR]     idempotent; also cleans a lab whose driver died
//	meshlab down --all                        every lab on the host, tests' and orphans too
//	meshlab status [--name lab] [--dir DIR]
//	meshlab exec [--name lab] MACHINE -- CMD [ARG...]
//	meshlab probes [--json] [--name lab] [--dir DIR]
//	meshlab reboot|stop|boot|cutoff|restore MACHINE
//	meshlab install-agent MACHINE BINARY [-- ARG...]   meshd at /usr/local/bin/meshd, as meshd.service
//	meshlab start-service|stop-service MACHINE UNIT
//
// A lab's state lives in DIR (default /var/tmp/meshlab/NAME).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"meshd/lab"
)

// verbs says what each verb does, for `meshlab help` and each verb's -h.
var verbs = []struct{ use, what string }{
	{"up [--scenario NAME] [--name LAB] [--dir DIR]", "raise a lab: machines as namespaces, shaped by the scenario"},
	{"down [--name LAB] [--dir DIR] | --all", "take a lab down (idempotent); --all takes down EVERY lab on this host, tests' included"},
	{"status [--json] [--name LAB] [--dir DIR]", "the lab's machines, their addresses and state"},
	{"exec [--name LAB] [--dir DIR] MACHINE -- CMD [ARG...]", "run a command on a machine (its namespaces)"},
	{"probes [--json] [--name LAB] [--dir DIR]", "every probe's calls, failures and longest outage"},
	{"reboot|stop|boot|cutoff|restore [--name LAB] [--dir DIR] MACHINE", "faults: reboot, power off/on, cut off from the underlay and back"},
	{"install-agent [--name LAB] [--dir DIR] MACHINE BINARY [-- ARG...]", "put meshd on a machine at /usr/local/bin/meshd and run it as meshd.service"},
	{"start-service|stop-service [--name LAB] [--dir DIR] MACHINE UNIT", "start or stop one of a machine's units (the predecessor's control, say)"},
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

func main() {
	if len(os.Args) < 2 {
		usage(2)
	}
	switch os.Args[1] {
	case "help", "-h", "-help", "--help":
		usage(0)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	verb := os.Args[1]
	fs := flag.NewFlagSet(verb, flag.ExitOnError)
	fs.Usage = func() {
		for _, v := range verbs {
			for _, name := range strings.Split(strings.Fields(v.use)[0], "|") {
				if name == verb {
					fmt.Fprintf(fs.Output(), "meshlab %s\n  %s\n", v.use, v.what)
				}
			}
		}
		fs.PrintDefaults()
	}
	name := fs.String("name", "lab", "lab name")
	dir := fs.String("dir", "", "lab state directory (default "+lab.DefaultStateRoot+"/NAME)")
	scenario := fs.String("scenario", "predecessor-ufw", "scenario to raise (up)")
	asJSON := fs.Bool("json", false, "print JSON (probes, status)")
	all := fs.Bool("all", false, "down: every lab on this host, also tests' and orphaned ones")
	_ = fs.Parse(os.Args[2:])
	if *dir == "" {
		*dir = filepath.Join(lab.DefaultStateRoot, *name)
	}
	var err error
	switch verb {
	case "up":
		err = up(ctx, *scenario, *name, *dir)
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
		err = status(*dir, *asJSON)
	case "probes":
		err = probes(*dir, *asJSON)
	case "exec":
		os.Exit(execIn(ctx, *dir, fs.Args()))
	case "reboot", "stop", "boot", "cutoff", "restore":
		err = act(ctx, *dir, verb, fs.Args())
	case "install-agent", "start-service", "stop-service":
		err = service(ctx, *dir, verb, fs.Args())
	default:
		fmt.Fprintf(os.Stderr, "meshlab: unknown verb %q\n", verb)
		usage(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "meshlab %s: %v\n", verb, err)
		os.Exit(1)
	}
}

func up(ctx context.Context, scenario, name, dir string) error {
	sc, err := lab.ScenarioByName(scenario)
	if err != nil {
		return err
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	l, err := lab.Start(ctx, sc, lab.Options{Name: name, Dir: dir})
	if err != nil {
		return fmt.Errorf("%w (run `meshlab down --name %s` to clean up)", err, name)
	}
	fmt.Printf("lab %s up (scenario %s) in %s; state in %s\n", l.Name, l.Scenario, time.Since(start).Round(time.Millisecond), l.Dir)
	return status(dir, false)
}

func status(dir string, asJSON bool) error {
	l, err := lab.Load(dir)
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

func probes(dir string, asJSON bool) error {
	l, err := lab.Load(dir)
	if err != nil {
		return err
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

func execIn(ctx context.Context, dir string, args []string) int {
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
	l, err := lab.Load(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshlab exec:", err)
		return 1
	}
	m := l.Machine(machine)
	if m == nil {
		fmt.Fprintf(os.Stderr, "meshlab exec: lab %s has no machine %q\n", l.Name, machine)
		return 1
	}
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

// service installs the meshd agent on a machine, or starts or stops one of its units.
func service(ctx context.Context, dir, verb string, args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("want MACHINE and %s", map[bool]string{true: "BINARY", false: "UNIT"}[verb == "install-agent"])
	}
	l, err := lab.Load(dir)
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
	default:
		return m.StopService(ctx, args[1])
	}
}

func act(ctx context.Context, dir, verb string, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("want one MACHINE")
	}
	l, err := lab.Load(dir)
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
