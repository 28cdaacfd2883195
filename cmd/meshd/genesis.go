package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"meshd/agent"
	"meshd/api"
	"meshd/fsm"
	"meshd/setup"
)

// genesisCmd declares the genesis command: its help text, flags and the call into setup.Genesis.
// It is long because it is declarations (a help text that teaches, one line per flag), not logic.
func genesisCmd(g *globals) *cobra.Command {
	var (
		opts    setup.GenesisOptions
		adopted bool
		ports   []string
		images  []string
		sets    []string
	)
	cmd := &cobra.Command{
		Use:   "genesis --name NAME [--adopted] [--data-dir DIR] [--port KEY=N ...]",
		Short: "Begin a mesh on this machine, its control-node",
		Long: `Genesis makes this machine the control-node of a new mesh: it gives the node its identity,
bootstraps a one-server Raft group in the data dir and records the node, its mode, its settings and
the catalogue, with the foundation (mesh, store, broker, registry) assigned. Then it exits; start the
node with ` + "`meshd agent --data-dir DIR`" + `.

--adopted raises the node adopted: what meshd finds on the machine is held, not replaced, until each
module is taken. Use it on a machine that is already serving.

Every foundation port is an input (the catalogue's numbers are only defaults) and becomes this node's
setting in the record: --port registry=5001, --port bus=7070, --port broker.management=15673.
Port names: store, broker, broker.management, registry, bus, raft, gossip, tunnel.

Before anything is raised a preflight checks the machine and reports every finding at once, each
with a stable check name (--json for scripts): every foundation port free on the address it will
bind (a held port names its holder: the process and pid, or the container whose published port it
is); the private network's range clear of any tunnel running beside it; the found firewall one meshd
speaks. A converged genesis also refuses a machine in use (an active firewall, or anything
listening), naming each: use --adopted there. --dry-run runs the preflight alone.

--take-tunnel IFACE (with --adopted) takes the predecessor's WireGuard tunnel IFACE over in place
(ADR 0105): its port becomes mesh.tunnel and its range the record's range (no --port tunnel=N is
needed, and neither the port the found tunnel holds nor its range is a preflight conflict), its
address becomes the hub's, and its peers are carried. A --port tunnel=N or --set mesh.range=CIDR that
disagrees with the tunnel is refused, naming both values. The agent then stops IFACE without
flushing it and raises the mesh's interface in its place; see ` + "`meshd tunnel show`" + `.`,
		Example: `  meshd genesis --name hub --adopted --port registry=5001
  meshd genesis --name hub --adopted --take-tunnel wg0 --port registry=5001
  meshd genesis --name hub --data-dir /tmp/hub --advertise 127.0.0.1 --port raft=17071`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if opts.Ports, err = keyValues("--port", ports); err != nil {
				return err
			}
			if opts.Images, err = keyValues("--image", images); err != nil {
				return err
			}
			if opts.Settings, err = keyValues("--set", sets); err != nil {
				return err
			}
			opts.Mode = fsm.Converged
			if adopted {
				opts.Mode = fsm.Adopted
			}
			if opts.TakeTunnel != "" && !adopted {
				return errors.New("--take-tunnel takes a tunnel in use over: raise the node with --adopted")
			}
			var raftLog io.Writer = io.Discard
			if os.Getenv("MESHD_DEBUG") != "" {
				raftLog = os.Stderr
			}
			opts.LogOutput = raftLog
			pr := g.progress()
			opts.Progress = pr.Step
			res, err := setup.Genesis(opts, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
			pr.Done(err == nil)
			var pe *setup.PreflightError
			if errors.As(err, &pe) && g.json {
				_ = g.emit(map[string]any{"ok": false, "findings": pe.Findings}, nil)
				return errors.New("genesis refused by its preflight")
			}
			if err != nil {
				return err
			}
			if res.DryRun {
				return g.emit(map[string]any{"ok": true, "findings": res.Findings, "dry_run": true, "tunnel": res.Tunnel}, func(w io.Writer) {
					fmt.Fprintln(w, "preflight passed; nothing was changed (--dry-run)")
					printFindings(w, res.Findings)
					printTunnelFields(w, "the takeover of "+opts.TakeTunnel+": what was read, beside what the mesh raises in its place", res.Tunnel)
				})
			}
			return g.emit(res, func(w io.Writer) {
				printFindings(w, res.Findings)
				printTunnelFields(w, "the takeover of "+opts.TakeTunnel+": what was read, beside what the agent raises in its place", res.Tunnel)
				n := res.Node
				fmt.Fprintf(w, "genesis: node %s is the control-node, %s\n", n.Name, modeWord(n.Mode))
				fmt.Fprintf(w, "id\t%s\n", n.ID)
				fmt.Fprintf(w, "data dir\t%s\n", res.DataDir)
				fmt.Fprintf(w, "private address\t%s\n", n.Address)
				fmt.Fprintf(w, "assigned\t%s\n", list(n.Assigned))
				if len(n.Settings) > 0 {
					var kv []string
					for _, k := range sortedKeys(n.Settings) {
						kv = append(kv, k+"="+n.Settings[k])
					}
					fmt.Fprintf(w, "settings\t%s\n", strings.Join(kv, " "))
				}
				fmt.Fprintf(w, "mesh CA\t%s\n", res.CAFingerprint)
				fmt.Fprintf(w, "seal key\t%s\n", res.SealKey)
				printRecoveryCode(w, res.RecoveryCode, res.SealKey)
				fmt.Fprintf(w, "\n%s\n", startHint(res.DataDir))
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Name, "name", "", "this node's name (required)")
	f.BoolVar(&adopted, "adopted", false, "raise the node adopted: keep what is found until each module is taken")
	f.StringVar(&opts.DataDir, "data-dir", agent.DefaultDataDir, "where the node keeps its identity and record")
	f.StringArrayVar(&ports, "port", nil, "a foundation port, KEY=N (repeatable)")
	f.StringArrayVar(&images, "image", nil, "a foundation module's image, MODULE=REF (repeatable)")
	f.StringArrayVar(&sets, "set", nil, "any other setting, MODULE.SETTING=VALUE (repeatable), e.g. mesh.range=10.99.0.0/24")
	f.StringVar(&opts.DockerHost, "docker-host", "", "the Docker engine, for published ports (default unix:///var/run/docker.sock)")
	f.StringVar(&opts.SealKey, "seal-key", "", "the seal key file the node's secrets are sealed under (default $MESHD_SEAL_KEY, else /etc/meshd/seal.key)")
	f.StringVar(&opts.TakeTunnel, "take-tunnel", "", "take the found WireGuard interface IFACE over in place: its port, range, address, key and peers (needs --adopted)")
	f.BoolVar(&opts.DryRun, "dry-run", false, "run the preflight only and change nothing")
	f.StringVar(&opts.Advertise, "advertise", "", "the address other servers reach this one at (default: the first global IPv4 address)")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

func printFindings(w io.Writer, fs []api.Finding) {
	for _, f := range fs {
		fmt.Fprintf(w, "%s: %s: %s\n", f.Level, f.Check, f.Message)
	}
}

func keyValues(flag string, in []string) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range in {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%s %q: write KEY=VALUE", flag, s)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%s %s is given twice", flag, k)
		}
		out[k] = v
	}
	return out, nil
}

func modeWord(m fsm.Mode) string {
	if m == fsm.Adopted {
		return "ADOPTED (what is found is held until its module is taken)"
	}
	return string(m)
}

// startHint says how to start the agent genesis or join just made a node for: the package's
// unit when its config (/etc/meshd/meshd.yaml, data_dir /var/lib/meshd) names this data dir.
func startHint(dataDir string) string {
	byHand := "meshd agent --data-dir " + dataDir
	if filepath.Clean(dataDir) == "/var/lib/meshd" {
		return "start it: systemctl enable --now meshd (the package's unit), or by hand: " + byHand
	}
	return "start it: set data_dir: " + dataDir + " in /etc/meshd/meshd.yaml, then systemctl enable --now meshd; or by hand: " + byHand
}
