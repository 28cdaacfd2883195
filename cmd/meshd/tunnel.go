package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"meshd/api"
	"meshd/fsm"
	"meshd/report"
	"meshd/wg"
)

// tunnelCmd declares the tunnel subcommands (take, show) and the hidden tunnel-device; long only
// because it is their declarations side by side, each calling the agent's API or package wg.
func tunnelCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "tunnel", Short: "The private network: take a found tunnel over, show the tunnel"}
	var req fsm.Placement
	var wf waitFlags
	var dryRun bool
	take := &cobra.Command{
		Use:   "take NODE IFACE [--address IP] [--port N] [--range CIDR] [--wait 2m | --no-wait] [--dry-run]",
		Short: "Take the WireGuard tunnel found on NODE over in place (ADR 0105)",
		Long: `Take reads the WireGuard interface IFACE found on NODE (its key, port, address and range, and every
peer) and records the take: the tunnel's port becomes NODE's mesh.tunnel setting, its range the
record's range, its address the hub's, and its peers are carried as peers of the tunnel (not nodes)
until they enrol, each keeping its address. Then NODE's host stops IFACE without flushing it (its
wg-quick file stays on disk byte for byte; its wg-quick@ unit is masked) and raises the mesh's
interface under IFACE's own name, so every firewall rule, PostUp leftover and resolver that names
IFACE keeps working. It carries what the live device and link have, not only the file: the key,
the port as it listens, every address (IPv4 and IPv6), each peer's preshared key, allowed IPs,
endpoint and keepalive, the routes wg-quick installed (its own table and firewall mark for a peer
allowed everything), and the MTU. Everything is prepared (under the name meshd-take) before IFACE
goes down. Nothing a peer knows changes; ` + "`meshd tunnel show`" + ` lists the found interface beside
the mesh's, field by field.

Run it on NODE (the hub): the found tunnel is read where it runs. --address, --port and --range say
where the operator expects the tunnel to be; a value that disagrees with the tunnel is refused
before anything changes, naming both.

On a spoke (a node that joined with --tunnel IFACE and kept its address), run it on any server:
the record already holds the tunnel's key and the node's address. The spoke's host checks that
IFACE still has that key, its mesh.tunnel port and its address, then takes it over the same way:
the mesh's interface under IFACE's name with the found key, the hub as the peer routing the range, and every other
node with its own interface as a direct peer, so their traffic does not turn at the hub. Until
then the spoke's found tunnel carries its traffic, and the other nodes reach it through the hub.

The take is recorded first (committed through Raft); the command then follows NODE until its report
says the mesh's interface is up in place of IFACE (exit 0), or that the takeover failed (exit 1, naming the
node, the tunnel resource and the node's reason: IFACE is left carrying the peers, or is back), or
until --wait ends (exit 1; the take stays in the record). --no-wait returns once it is recorded.

--dry-run records nothing: it lists IFACE as read beside what NODE's host will raise in its
place, field by field (the hub's read where it runs; a spoke's from its last report). A take
whose interface has a field meshd would not carry is refused, naming it, before anything stops.`,
		Example: `  meshd tunnel take hub wg0
  meshd tunnel take hub wg0 --port 51820 --range 10.44.0.0/24
  meshd tunnel take peer2 wg0     # a spoke that joined with --tunnel wg0
  meshd tunnel take peer2 wg0 --dry-run`,
		Args: exactArgs("NODE", "IFACE"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			if dryRun {
				var p api.TunnelTakePreview
				if err := g.client().Post(ctx, "/v1/tunnel/take", api.TunnelTakeRequest{Node: args[0], Interface: args[1], Requested: req, DryRun: true}, &p); err != nil {
					return err
				}
				return g.emit(p, func(w io.Writer) {
					fmt.Fprintf(w, "nothing was recorded or stopped (--dry-run); %s, from %s\n", args[1], p.From)
					printTunnelFields(w, "the takeover of "+args[1]+" on "+args[0]+": what was read, beside what its host raises in its place", p.Fields)
				})
			}
			var v fsm.TunnelTaken
			pr := g.progress()
			pr.Step(fmt.Sprintf("reading %s on %s and recording its takeover (committed through Raft before the answer)", args[1], args[0]))
			err := g.client().Post(ctx, "/v1/tunnel/take", api.TunnelTakeRequest{Node: args[0], Interface: args[1], Requested: req}, &v)
			var nv api.NodeView
			if err == nil && !wf.noWait {
				act := "the takeover of tunnel " + args[1]
				carried := func(r *report.Report) report.Carried { return report.ReportTunnelTake(r, args[1]) }
				nv, err = g.follow(pr, args[0], wf.wait, checkCarried(args[0], act, carried), lateCarried(args[0], act, wf.wait, carried))
			} else {
				pr.Done(err == nil)
			}
			if err != nil {
				return err
			}
			return g.emit(v, func(w io.Writer) { writeTunnelTaken(w, v, nv.Report) })
		},
	}
	take.Flags().StringVar(&req.Address, "address", "", "the hub's tunnel address the operator expects (refused if it is not the tunnel's)")
	take.Flags().Uint16Var(&req.Port, "port", 0, "the tunnel port the operator expects (refused if it is not the tunnel's; on a spoke: the found tunnel's port, which becomes its mesh.tunnel)")
	take.Flags().StringVar(&req.Range, "range", "", "the range the operator expects (refused if it does not hold the tunnel's address)")
	wf.add(take, "the takeover")
	take.Flags().BoolVar(&dryRun, "dry-run", false, "list the found interface beside what the takeover raises, field by field, and record nothing")

	show := &cobra.Command{
		Use:   "show",
		Short: "Show the private network: its range, the hub, each peer enrolled or carried, the hub's tunnel state",
		Long: `Show prints the private network's range, the hub and its address and port, the found interface the
hub took over, and each peer of the tunnel: carried (a peer of the tunnel, not yet a node) or
enrolled (yes, node NAME), with when the hub last heard from it and the bytes the hub's device
received from it (RX) and sent to it (TX).

It runs on any node: the peers' liveness comes from the hub's host report, signed with the hub's
identity and carried by gossip to every server, so every server says the same ("hub's report"
says how old that report is and how it came). LAST HEARD is the later of the peer's last
WireGuard handshake and the hub's last pass that saw it send (a handshake is renewed only every
two minutes); "never" is a peer the hub's device has not heard since it came up.

STATE is the hub's tunnel as its host last reported it: found-up (the found interface still
carries the peers), mesh-up (the mesh's interface in its place), or found-down-mesh-not-up (the
found interface is down and the mesh's is not up: the peers reach nothing).

Exit status: 0 when the hub reports found-up, mesh-up or nothing yet; 1 when it reports
found-down-mesh-not-up (the output is printed first, --json too), or when no server answered.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var v api.TunnelView
			if err := g.client().Get(ctx, "/v1/tunnel", &v); err != nil {
				return err
			}
			err := g.emit(v, func(w io.Writer) { printTunnelView(w, v, time.Now()) })
			if err != nil {
				return err
			}
			if v.State == report.TunnelDark {
				return errors.New("the hub's found tunnel is down and the mesh's is not up: its peers reach nothing")
			}
			return nil
		},
	}
	cmd.AddCommand(take, show)
	return cmd
}

// writeTunnelTaken is `meshd tunnel take`'s answer in text: what the record took, and when the
// node's report (nil with --no-wait) says the mesh's interface is up in the found one's place.
func writeTunnelTaken(w io.Writer, v fsm.TunnelTaken, rep *report.Report) {
	spoke := v.Node.Name != v.Tunnel.Hub
	if spoke {
		fmt.Fprintf(w, "node %s takes its tunnel %s over\n", v.Node.Name, v.Node.FoundTunnel)
		fmt.Fprintf(w, "address\t%s\n", v.Node.Address)
	} else {
		fmt.Fprintf(w, "node %s takes tunnel %s over\n", v.Node.Name, v.Tunnel.Taken)
		fmt.Fprintf(w, "range\t%s\n", v.Tunnel.Range)
		fmt.Fprintf(w, "hub address\t%s\n", v.Tunnel.HubAddress)
		fmt.Fprintf(w, "port\t%s\n", v.Node.Settings["mesh.tunnel"])
		fmt.Fprintf(w, "carried peers\t%d\n", len(v.Tunnel.Carried))
		for _, s := range v.Skipped {
			fmt.Fprintf(w, "skipped\t%s\n", s)
		}
	}
	if rep != nil {
		var det report.TunnelDetail
		iface := v.Node.FoundTunnel
		if api.DecodeInto(rep.Kinds[fsm.KindTunnel], &det) && det.Interface != "" {
			iface = det.Interface
		}
		if !spoke {
			iface = v.Tunnel.Taken
		}
		fmt.Fprintf(w, "carried out\tthe mesh's %s up in its place (node %s's report of %s)\n", iface, v.Node.Name, rep.When.Format(time.RFC3339))
	}
	if spoke {
		fmt.Fprintf(w, "\nwatch it with: meshd node show %s\n", v.Node.Name)
		return
	}
	fmt.Fprintf(w, "\nwatch it with: meshd tunnel show\n")
}

// printTunnelFields puts the found interface beside the mesh's, field by field, under title:
// what the takeover kept, or will (a preshared key shows only as set or none).
func printTunnelFields(w io.Writer, title string, fs []report.TunnelField) {
	if len(fs) == 0 {
		return
	}
	differ, added := 0, 0
	for _, f := range fs {
		switch {
		case f.Added:
			added++
		case !f.Same:
			differ++
		}
	}
	fmt.Fprintf(w, "\n%s (%d fields, %d differ, %d added by the mesh)\n", title, len(fs), differ, added)
	fmt.Fprintln(w, "FIELD\tFOUND\tMESH\tSAME")
	for _, f := range fs {
		same := "yes"
		switch {
		case f.Added:
			same = "added"
		case !f.Same:
			same = "DIFFERS"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", f.Field, f.Found, f.Mesh, same)
	}
}

// printTunnelView is `meshd tunnel show` in text: the record's network, the hub's state from
// its report, and every peer with when the hub last heard it.
func printTunnelView(w io.Writer, v api.TunnelView, now time.Time) {
	fmt.Fprintf(w, "range\t%s\n", v.Range)
	fmt.Fprintf(w, "hub\t%s %s port %d\n", v.Hub, v.HubAddress, v.Port)
	if v.Taken != "" {
		fmt.Fprintf(w, "taken over\t%s\n", v.Taken)
		fmt.Fprintf(w, "found unit\t%s\n", foundUnitLine(v.Taken, v.Hub, v.FoundUnit))
		if v.Hooks != "" {
			fmt.Fprintf(w, "found hooks\t%s\n", v.Hooks)
		}
	}
	state := v.State
	if state == "" {
		state = "- (the hub reports no tunnel)"
	} else if v.Says != "" {
		state += " (" + v.Says + ")"
	}
	fmt.Fprintf(w, "state\t%s\n", state)
	if v.Reason != "" {
		fmt.Fprintf(w, "reason\t%s\n", v.Reason)
	}
	if !v.ReportAt.IsZero() {
		fmt.Fprintf(w, "hub's report\t%s ago (%s)\n", ago(now, v.ReportAt), v.ReportFrom)
	}
	if v.Interface != "" {
		fmt.Fprintf(w, "mesh interface\t%s\n", v.Interface)
	}
	printTunnelFields(w, "found beside mesh", v.Fields)
	fmt.Fprintln(w)
	printTunnelPeers(w, v.Peers, now)
}

// printTunnelPeers is the table of the tunnel's peers, in tunnel show and status.
func printTunnelPeers(w io.Writer, peers []api.TunnelPeer, now time.Time) {
	fmt.Fprintf(w, "PEER\tADDRESS\tENROLLED\tENDPOINT\tLAST HEARD\tRX\tTX\n")
	if len(peers) == 0 {
		fmt.Fprintln(w, "-")
	}
	for _, p := range peers {
		enrolled := "no (carried)"
		if p.Enrolled {
			enrolled = "yes, node " + p.Node
		}
		heard := "never"
		if !p.LastHeard.IsZero() {
			heard = ago(now, p.LastHeard) + " ago"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.PublicKey, p.Address, enrolled, report.OrDash(p.Endpoint), heard, bytesText(p.ReceiveBytes), bytesText(p.TransmitBytes))
	}
}

// ago is how long before now t was, to the second (0s for a clock a little ahead).
func ago(now, t time.Time) string { return max(now.Sub(t), 0).Round(time.Second).String() }

// bytesText is a byte count in B, KiB, MiB or GiB.
func bytesText(n int64) string {
	const k = 1024
	switch {
	case n < k:
		return fmt.Sprintf("%d B", n)
	case n < k*k:
		return fmt.Sprintf("%.1f KiB", float64(n)/k)
	case n < k*k*k:
		return fmt.Sprintf("%.1f MiB", float64(n)/(k*k))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(k*k*k))
}

// tunnelDeviceCmd is the userspace WireGuard device the agent starts in a process of its own
// (wg.RunDevice), so the tunnel outlives a restart of the agent. Not an operator's command.
func tunnelDeviceCmd() *cobra.Command {
	var mtu int
	cmd := &cobra.Command{
		Use:    "tunnel-device IFACE",
		Short:  "Run the mesh's userspace WireGuard device IFACE (started by the agent)",
		Hidden: true,
		Args:   exactArgs("IFACE"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			signal.Ignore(syscall.SIGHUP)
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			return wg.RunDevice(ctx, args[0], mtu, log.With("device", args[0]))
		},
	}
	noJSON(cmd, "a device's log")
	cmd.Flags().IntVar(&mtu, "mtu", 1420, "the device's MTU")
	return cmd
}
