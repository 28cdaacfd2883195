package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"meshd/api"
	"meshd/fsm"
	"meshd/report"
)

// statusCmd is `meshd status`; writeStatus renders it as text.
func statusCmd(g *globals) *cobra.Command {
	var f statusFilter
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the mesh: every node's mode, liveness, held counts, the leader, assigned and taken counts",
		Long: `Status lists every node with its mode. An adopted node is marked ADOPTED: the firewall and files
found on it stay in force until its modules are taken and it is converged, so a node left behind is
visible here.

ROLE is server or client (",control" for the control-node); LIVE is the node's state in the
answering server's gossip view (alive, failed, left, or unknown when gossip never saw it); HELD
counts the files and containers its last report holds as found (reports travel by gossip, signed by
the node and verified by the server); ASSIGNED and TAKEN count its modules.

While a migration runs, the board follows: each node's NEXT step, how long it has been adopted,
its TRACK (✓ done, · to do) and, indented, what is in the way of its next step.

Below the nodes, the private network's peers as 'meshd tunnel show' lists them: each peer carried
or enrolled (as which node), when the hub last heard it and the bytes moved, from the hub's report.
A node whose tunnel is found-down-mesh-not-up (its peers reach nothing) is named TUNNEL DOWN; a
converged node whose retired found firewall was enabled again by hand (it filters beside meshd's
filter) is named FOUND FIREWALL ACTIVE AGAIN.

Counts come first: the nodes by mode and by liveness, and each module assigned somewhere by where it
stands on its nodes (in force, pending, failed: meshd module status MODULE lists them). The nodes
and the board are listed one by one up to 30 nodes, or with --list; --state keeps the nodes in a
mode (adopted, converged), a liveness (alive, failed, left, unknown) or with a module in force or
pending ("failed" is a node failed in gossip or a module failed on it); --module keeps the nodes a
module is assigned to (with --state, where it is in that state). --json keeps every node unless
--state or --module filters them; its counts are always the whole fleet's.

On a client's socket, which holds no record, status shows the node itself: its mode and modules
as its declaration from a server says, the servers it follows and which answered last, its gossip
members, and the servers where the whole record is read (or use an operator credential).

With --json, one document: leader, index, voters, nodes, gossip, served_by, and board, tunnel and
privileged when there are any; on a client's socket nodes and voters are [] and client holds the
node's own view.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := f.check(); err != nil {
				return err
			}
			ctx, cancel := g.ctx()
			defer cancel()
			var st api.StatusView
			if err := g.client().Get(ctx, "/v1/status", &st); err != nil {
				return err
			}
			f.apply(&st)
			return g.emit(st, func(w io.Writer) { writeStatusOf(w, st, f) })
		},
	}
	cmd.Flags().BoolVar(&f.list, "list", false, "list every node one by one (the default up to 30 nodes)")
	cmd.Flags().StringVar(&f.state, "state", "", "only the nodes in this mode (adopted, converged), liveness (alive, failed, left, unknown) or with a module in force or pending")
	cmd.Flags().StringVar(&f.module, "module", "", "only the nodes this module is assigned to (with --state: where it is in that state: in force, pending, failed)")
	return cmd
}

// writeStatus is status's text with no filter.
func writeStatus(w io.Writer, st api.StatusView) { writeStatusOf(w, st, statusFilter{}) }

// writeStatusOf is status's text: the leader and voters, the counts, the nodes (f says which),
// rejected reports, the tunnel's peers, then what needs the operator (a tunnel down, a found
// firewall active again, adopted nodes).
func writeStatusOf(w io.Writer, st api.StatusView, f statusFilter) {
	if st.Client != nil {
		writeClientStatus(w, *st.Client, time.Now())
		return
	}
	leader := st.Leader.Node
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(w, "leader: %s %s\trecord index: %d\n", leader, st.Leader.Address, st.Index)
	if st.Leader.Why != "" {
		fmt.Fprintf(w, "why: %s\n", st.Leader.Why)
	}
	fmt.Fprintf(w, "voters: %s\tanswered by: %s\n", strings.Join(st.Voters, ", "), st.ServedBy)
	if st.Stale != "" {
		fmt.Fprintf(w, "stale: %s\n", st.Stale)
	}
	if st.Warning != "" {
		fmt.Fprintf(w, "warning: %s\n", st.Warning)
	}
	if st.Board != nil {
		fmt.Fprintf(w, "migration: %s\n", st.Board.Summary)
	}
	for _, p := range st.Privileged {
		if p.Unconfirmed {
			fmt.Fprintf(w, "UNCONFIRMED: module %s is root on the machines it is assigned to (%s) and no operator has said it may be; "+
				"it keeps working where it is assigned: meshd module confirm %s, or add it again in its own places\n",
				p.Module, strings.Join(p.Reaches, "; "), p.Module)
		}
	}
	writeCounts(w, st.Counts)
	fmt.Fprintln(w)
	listed := f.listing(len(st.Nodes))
	if listed {
		fmt.Fprintln(w, "NODE\tMODE\tROLE\tADDRESS\tLIVE\tHELD\tASSIGNED\tTAKEN")
	} else {
		fmt.Fprintf(w, "%d nodes: each one with --list, some with --state or --module, one with `meshd node show NODE`\n", len(st.Nodes))
	}
	adopted := 0
	for _, n := range st.Nodes {
		mode := string(n.Mode)
		if n.Mode == fsm.Adopted {
			mode = "ADOPTED"
			adopted++
		}
		if !listed {
			continue
		}
		role := "client"
		if n.Server {
			role = "server"
		}
		if n.ControlNode {
			role += ",control"
		}
		held := "-"
		if n.ReportFrom != "" {
			held = plural(n.HeldFiles, "file") + ", " + plural(n.HeldContainers, "container")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", n.Name, mode, role, n.Address, n.Liveness, held, n.Assigned, n.Taken)
	}
	if st.Board != nil && listed {
		writeBoard(w, *st.Board)
	}
	var rejected []string
	for r, c := range st.Gossip.Rejected {
		rejected = append(rejected, fmt.Sprintf("%s %d", r, c))
	}
	sort.Strings(rejected)
	if len(rejected) > 0 {
		fmt.Fprintf(w, "\nreports rejected by %s: %s\n", st.Gossip.Node, strings.Join(rejected, ", "))
	}
	if st.Tunnel != nil && len(st.Tunnel.Peers) > 0 {
		fmt.Fprintf(w, "\ntunnel %s, hub %s: %s\n", st.Tunnel.Range, st.Tunnel.Hub, report.OrDash(st.Tunnel.State))
		printTunnelPeers(w, st.Tunnel.Peers, time.Now())
	}
	for _, n := range st.Nodes {
		if n.Tunnel == report.TunnelDark {
			fmt.Fprintf(w, "\nnode %s: TUNNEL DOWN: the found interface is down and the mesh's is not up; its peers reach nothing (meshd tunnel show)\n", n.Name)
		}
		if n.FirewallActiveAgain != "" {
			fmt.Fprintf(w, "\nnode %s: FOUND FIREWALL ACTIVE AGAIN: %s, retired at the flip, was enabled again by something else; it filters beside meshd's filter (meshd node show %s)\n", n.Name, n.FirewallActiveAgain, n.Name)
		}
	}
	if adopted > 0 {
		fmt.Fprintf(w, "\n%d node(s) ADOPTED: what was found on them is held until each module is taken.\n", adopted)
	}
}

func nodeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Inspect nodes and change their settings"}
	cmd.AddCommand(&cobra.Command{
		Use:   "show NODE",
		Short: "Show one node: mode, settings, modules assigned and taken, and its last host report",
		Long: `Show prints one node as the record holds it (mode and since when, role, addresses, the
modules assigned and taken, its settings) and its last host report: each held file (recorded and
current hash; "CHANGED BY SOMETHING ELSE" when a predecessor still writes it), the files meshd
wrote, each failed resource and why, the containers (held, or meshd's own: created, adopted or
replaced at take) and every published port, the found firewall and each opening with what
carries it, and the tunnel's state.

The report is the node's latest (one pass, 10 s by default, or sooner after a change): right after
an assign or a take it can still be the one from before; "host report at" says when it was made.
Before the node's host first reported it reads "host report none yet" (--json: no "report" key).`,
		Args: exactArgs("NODE"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var v api.NodeView
			if err := g.client().Get(ctx, "/v1/nodes/"+url.PathEscape(args[0]), &v); err != nil {
				return err
			}
			return g.emit(v, func(w io.Writer) { writeNodeView(w, v) })
		},
	})
	cmd.AddCommand(originalCmd(g))
	cmd.AddCommand(nodeSetCmd(g))
	cmd.AddCommand(nodeRemoveCmd(g))
	return cmd
}

// printReport prints what the node's host last saw: held files first, since they are what an
// adopted node keeps in force, then what it wrote and what failed.
func printReport(w io.Writer, rep *report.Report) {
	if rep == nil {
		fmt.Fprintf(w, "\nhost report\tnone yet (the node's host has not reported)\n")
		return
	}
	fmt.Fprintf(w, "\nhost report\tat %s\n", rep.When.Format("2006-01-02 15:04:05Z07:00"))
	fmt.Fprintf(w, "\nHELD FILE\tMODULE\tSTATE\tRECORDED\tCURRENT\n")
	if len(rep.Held) == 0 {
		fmt.Fprintln(w, "-")
	}
	for _, h := range rep.Held {
		state := "held, unchanged"
		if h.Changed {
			state = "held, " + strings.ToUpper(h.Reason)
		}
		if h.Unassigned {
			state += " (module unassigned; kept)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", h.Path, h.Module, state, short(h.RecordedHash), short(h.CurrentHash))
	}
	fmt.Fprintf(w, "\nWRITTEN FILE\tMODULE\tHASH\n")
	if len(rep.Written) == 0 {
		fmt.Fprintln(w, "-")
	}
	for _, f := range rep.Written {
		hash := short(f.Hash)
		if f.Kept {
			hash += " (create_once, kept)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", f.Path, f.Module, hash)
	}
	printContainers(w, rep.Kinds[fsm.KindContainer])
	printOpenings(w, rep.Kinds[fsm.KindOpening])
	printTunnel(w, rep.Kinds[fsm.KindTunnel])
	if len(rep.Errors) > 0 {
		fmt.Fprintf(w, "\nFAILED RESOURCE\tMODULE\tREASON\n")
		for _, e := range rep.Errors {
			fmt.Fprintf(w, "%s\t%s\t%s\n", e.Resource, e.Module, e.Reason)
		}
	}
}

func printTunnel(w io.Writer, raw any) {
	var td report.TunnelDetail
	if !api.DecodeInto(raw, &td) || td.State == "" {
		return
	}
	fmt.Fprintf(w, "\ntunnel\t%s %s port %d: %s (%s)\n", td.Interface, td.Address, td.Port, td.State, td.Says)
	if td.Found != "" {
		fmt.Fprintf(w, "taken over\t%s\n", td.Found)
	}
}

func printContainers(w io.Writer, raw any) {
	var cr report.ContainerReport
	if !api.DecodeInto(raw, &cr) {
		return
	}
	engine := cr.Engine
	if !cr.Reachable {
		engine += " UNREACHABLE: " + cr.EngineError
	}
	fmt.Fprintf(w, "\ncontainers\tengine %s\n", engine)
	fmt.Fprintf(w, "\nCONTAINER\tMODULE\tSTATE\tIMAGE\tPORTS\n")
	if len(cr.Containers) == 0 {
		fmt.Fprintln(w, "-")
	}
	for _, c := range cr.Containers {
		state := containerState(c.State)
		if c.Changed {
			state += ", " + strings.ToUpper(c.Reason)
		}
		if c.Unassigned {
			state += " (module unassigned; kept)"
		}
		if !c.Running && c.ID != "" {
			state += ", stopped"
		}
		if c.Aside != "" {
			state += "; the replaced one kept stopped as " + c.Aside
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", c.Name, c.Module, state, c.Image, list(c.Ports))
	}
	var others []string
	for _, p := range cr.Published {
		if p.Module == "" {
			others = append(others, fmt.Sprintf("%s:%d/%s (%s)", orAll(p.HostIP), p.HostPort, p.Proto, p.Container))
		}
	}
	if len(others) > 0 {
		fmt.Fprintf(w, "published by no module\t%s\n", strings.Join(others, ", "))
	}
}

func printOpenings(w io.Writer, raw any) {
	var od report.OpeningDetail
	if !api.DecodeInto(raw, &od) {
		return
	}
	fw := od.Firewall.Description + " (its counts are the found rules, without meshd's)"
	if od.Firewall.Kind == noFirewall {
		fw = "none: no firewall on this machine, nothing filters its traffic but meshd's own tables"
	}
	if od.Firewall.Refused != "" {
		fw = od.Firewall.Description + " REFUSED: " + od.Firewall.Refused
	}
	if od.Firewall.Retired {
		fw = od.Firewall.Description
	}
	fmt.Fprintf(w, "\nfound firewall\t%s\n", fw)
	switch {
	case od.Firewall.Retired && od.Firewall.ActiveAgain:
		fmt.Fprintf(w, "read on the machine now\t%s (the retired firewall in force again, beside meshd's filter)\n", od.Firewall.Detected)
	case od.Firewall.Retired && od.Firewall.Detected != "":
		fmt.Fprintf(w, "read on the machine now\t%s (what the retired firewall left and the container engine's rules; meshd's filter filters)\n", od.Firewall.Detected)
	}
	for _, t := range []*report.TableView{od.Guard, od.Filter} {
		if t != nil {
			fmt.Fprintf(w, "meshd table %s\t%s %s\n", t.Table, t.State, list(t.Ports))
		}
	}
	fmt.Fprintf(w, "\nOPENING\tMODULE\tTHROUGH\tSTATE\n")
	for _, o := range od.Openings {
		state := o.State
		if !o.RestoredAt.IsZero() {
			state += " at " + o.RestoredAt.Format("15:04:05")
		}
		if o.Reason != "" {
			state += ": " + o.Reason
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", o.Opening, o.Module, through(o), state)
	}
}

// through says what carries an opening: a rule meshd added to the found firewall (in its own
// terms, marked as meshd's), one of the found firewall's own rules, or meshd's filter.
func through(o report.OpeningView) string {
	var parts []string
	for _, p := range strings.Split(o.Through, " and ") {
		kind, found := strings.CutPrefix(p, "found ")
		switch {
		case !found:
			parts = append(parts, p)
		case kind == noFirewall:
			parts = append(parts, "no firewall (nothing filters it)")
		case strings.Contains(o.Reason, "own rule"):
			parts = append(parts, kind+"'s own rule")
		default:
			parts = append(parts, "meshd's rule in "+kind)
		}
	}
	return strings.Join(parts, " and ")
}

// noFirewall is the found firewall's kind on a machine without one (netfilter.KindNone).
const noFirewall = "none"

// plural says "1 file", "2 files".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// containerState is a container's state in the report's words for a reader: a found one held,
// else meshd's own, and how it became so ("created" would read as Docker's created-not-started).
func containerState(state string) string {
	switch state {
	case "":
		return "not there"
	case report.ContainerCreated:
		return "meshd's own (created by meshd)"
	case report.ContainerAdopted:
		return "meshd's own (the found one, adopted at take)"
	case report.ContainerReplaced:
		return "meshd's own (replaced the found one at take)"
	}
	return state
}

func orAll(ip string) string {
	if ip == "" {
		return "0.0.0.0"
	}
	return ip
}

func short(hash string) string {
	h := strings.TrimPrefix(hash, "sha256:")
	if h == "" {
		return "(gone)"
	}
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}

func originalCmd(g *globals) *cobra.Command {
	var output string
	var latest bool
	cmd := &cobra.Command{
		Use:   "original NODE PATH [--output FILE] [--latest] | original NODE file PATH | original NODE container NAME",
		Short: "Show what the node found: a file's original bytes or record, a container's configuration",
		Long: `When meshd finds a file at a declared path it records the file's original bytes, mode and owner
before anything else happens to it. "original NODE PATH" prints the bytes (or writes them to --output
FILE, mode 0600), also after the module was taken and the file replaced; --latest prints instead the
bytes a take saw just before it replaced the file (they differ when something else changed the file
while it was held). "original NODE file PATH" shows the record: hashes, mode and owner of the original
and of the latest bytes. With --json "original NODE PATH" prints one JSON document instead of the
bytes: node, path, show (original or latest), size, sha256, encoding (utf-8 when the bytes are
text, else base64) and content (left out with --output).

"original NODE container NAME" shows a found container's configuration as found and, once a take
replaced it, the configuration replaced and the name it is kept under, stopped, until you remove it
(NAME.meshd-replaced-<id>): stepping back is stopping the new one, renaming the kept one back to NAME
and starting it.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 3 && (args[1] == "file" || args[1] == "container") {
				return nil
			}
			return exactArgs("NODE", "PATH")(cmd, args)
		},
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			base := "/v1/nodes/" + url.PathEscape(args[0]) + "/original?"
			if len(args) == 3 {
				return originalRecord(ctx, g, base, args[1], args[2])
			}
			path := base + "path=" + url.QueryEscape(args[1])
			if latest {
				path += "&show=latest"
			}
			var buf bytes.Buffer
			if err := g.client().Get(ctx, path, &buf); err != nil {
				return err
			}
			if output != "" {
				if err := os.WriteFile(output, buf.Bytes(), 0o600); err != nil {
					return err
				}
			}
			if g.json {
				return g.emit(originalDoc(args[0], args[1], latest, output, buf.Bytes()), nil)
			}
			if output != "" {
				return nil
			}
			_, err := g.out.Write(buf.Bytes())
			return err
		},
	}
	cmd.Flags().StringVar(&output, "output", "", "write the original to FILE instead of printing it")
	cmd.Flags().BoolVar(&latest, "latest", false, "the bytes a take saw just before it replaced the file, not the original")
	return cmd
}

// originalDoc is `node original NODE PATH --json`: the bytes with what a script checks them by.
// Text is carried as it is; other bytes in base64, which encoding names.
func originalDoc(node, path string, latest bool, output string, b []byte) map[string]any {
	sum := sha256.Sum256(b)
	v := map[string]any{"node": node, "path": path, "show": "original", "size": len(b),
		"sha256": "sha256:" + hex.EncodeToString(sum[:])}
	if latest {
		v["show"] = "latest"
	}
	switch {
	case output != "":
		v["output"] = output
	case utf8.Valid(b):
		v["encoding"], v["content"] = "utf-8", string(b)
	default:
		v["encoding"], v["content"] = "base64", base64.StdEncoding.EncodeToString(b)
	}
	return v
}

// originalRecord shows what the node recorded of a found file or container.
func originalRecord(ctx context.Context, g *globals, base, what, name string) error {
	if what == "container" {
		var c report.ContainerFound
		if err := g.client().Get(ctx, base+"container="+url.QueryEscape(name), &c); err != nil {
			return err
		}
		return g.emit(c, func(w io.Writer) {
			fmt.Fprintf(w, "container\t%s (module %s, %s)\n", c.Name, c.Module, c.State)
			fmt.Fprintf(w, "found\t%s, image %s, at %s\n", short(c.FoundID), c.FoundImage, c.FoundAt.Format(time.RFC3339))
			if c.Aside != "" {
				fmt.Fprintf(w, "replaced\t%s at %s, kept stopped as %s until you remove it\n", short(c.ReplacedID), c.ReplacedAt.Format(time.RFC3339), c.Aside)
				restore := ""
				if c.AsideRestart != "" && c.AsideRestart != "no" {
					fmt.Fprintf(w, "restart policy\tno while kept aside; it was %s\n", c.AsideRestart)
					restore = fmt.Sprintf("docker update --restart=%s %s; ", c.AsideRestart, c.Name)
				}
				fmt.Fprintf(w, "step back\tdocker stop %s; docker rename %s %s.stepped-back; docker rename %s %s; %sdocker start %s\n",
					c.Name, c.Name, c.Name, c.Aside, c.Name, restore, c.Name)
			}
			if c.TakeUnderWay {
				fmt.Fprintf(w, "take\tunder way: the agent finishes it on its next pass\n")
			}
			cfg := c.Replaced
			if len(cfg) == 0 {
				cfg = c.Original
			}
			var out bytes.Buffer
			if json.Indent(&out, cfg, "", "  ") == nil {
				fmt.Fprintf(w, "configuration:\n%s\n", out.String())
			}
		})
	}
	var f report.FileOriginal
	if err := g.client().Get(ctx, base+"show=record&path="+url.QueryEscape(name), &f); err != nil {
		return err
	}
	owner := func(uid, gid *int) string {
		if uid == nil || gid == nil {
			return "(not recorded)"
		}
		return fmt.Sprintf("%d:%d", *uid, *gid)
	}
	return g.emit(f, func(w io.Writer) {
		fmt.Fprintf(w, "file\t%s (module %s)\n", f.Path, f.Module)
		mode := f.Mode
		if mode == "" {
			mode = "(not recorded)"
		}
		fmt.Fprintf(w, "original\t%s, %d bytes, mode %s, owner %s, found %s\n", short(f.Hash), f.Size, mode, owner(f.UID, f.GID), f.FoundAt.Format(time.RFC3339))
		if l := f.Latest; l != nil {
			changed := "the same as the original"
			if l.ChangedSinceFound {
				changed = "changed by something else since it was found (meshd node original --latest prints it)"
			}
			fmt.Fprintf(w, "latest\t%s, %d bytes, mode %s, owner %d:%d, at the take %s: %s\n", short(l.Hash), l.Size, l.Mode, l.UID, l.GID, l.At.Format(time.RFC3339), changed)
		}
	})
}

func declarationCmd(g *globals) *cobra.Command {
	var index uint64
	cmd := &cobra.Command{
		Use:   "declaration NODE",
		Short: "Print exactly what the controller sends a node",
		Long: `The declaration is what the controller composes for one node: its mode, its assigned and taken
modules, and every resource of its assigned modules with the node's settings filled in. A resource
marked taken converges; one not taken is only prepared (what is found is held).

--wait-index N blocks until this node's declaration changes after index N, the way a node
watches (writes that leave it alone, such as history, do not wake it).`,
		Args: exactArgs("NODE"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			path := "/v1/declaration/" + url.PathEscape(args[0])
			if index > 0 {
				path += fmt.Sprintf("?index=%d&wait=50s", index)
			}
			var v api.DeclarationView
			if err := g.client().Get(ctx, path, &v); err != nil {
				return err
			}
			d := v.Declaration
			if g.json {
				return g.emit(d, nil)
			}
			return g.emit(d, func(w io.Writer) {
				mode := string(d.Mode)
				if d.Mode == fsm.Adopted {
					mode = "ADOPTED"
				}
				fmt.Fprintf(w, "node\t%s\nmode\t%s\nindex\t%d\naddress\t%s\nassigned\t%s\ntaken\t%s\n\n", d.Node, mode, v.Index, d.Address, list(d.Assigned), list(d.Taken))
				fmt.Fprintln(w, "MODULE\tKIND\tSTATE\tRESOURCE")
				for _, r := range d.Resources {
					state := "prepare (hold if found)"
					if r.Taken {
						state = "converge"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.Module, r.Kind, state, describe(r))
				}
			})
		},
	}
	cmd.Flags().Uint64Var(&index, "wait-index", 0, "block until the declaration changes after this index")
	return cmd
}

func describe(r fsm.Resource) string {
	switch {
	case r.File != nil:
		return fmt.Sprintf("%s (mode %s)", r.File.Path, r.File.Mode)
	case r.Container != nil:
		return fmt.Sprintf("%s image %s ports %s", r.Container.Name, r.Container.Image, list(r.Container.Ports))
	case r.Opening != nil:
		o := r.Opening
		g := ""
		if o.Guarded {
			g = ", guarded"
		}
		return fmt.Sprintf("%d/%s from %s, %s%s", o.Port, o.Proto, o.From, o.Path, g)
	}
	return ""
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func operatorCmd(g *globals) *cobra.Command {
	op := &cobra.Command{Use: "operator", Short: "Operate the control plane itself"}
	rf := &cobra.Command{Use: "raft", Short: "Inspect and operate the Raft group: its servers, its leader, recovery from a lost quorum"}
	rf.AddCommand(&cobra.Command{
		Use:   "list-peers",
		Short: "List the Raft servers, their addresses and which one leads",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var peers []api.PeerView
			if err := g.client().Get(ctx, "/v1/raft/peers", &peers); err != nil {
				return err
			}
			var here api.RaftStateView
			if err := g.client().Get(ctx, "/v1/raft/state", &here); err != nil {
				return err
			}
			return g.emit(peers, func(w io.Writer) {
				fmt.Fprintln(w, "NODE\tID\tADDRESS\tSUFFRAGE\tSTATE")
				for _, p := range peers {
					state := "follower"
					if p.Leader {
						state = "leader"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", p.Node, p.ID, p.Address, strings.ToLower(p.Suffrage), state)
				}
				fmt.Fprintf(w, "\nthis server (%s): %s, term %d, log ends at %d, commit %d, record applied %d", here.Node, strings.ToLower(here.State), here.Term, here.LastIndex, here.CommitIndex, here.Applied)
				if here.LastContact != "" {
					fmt.Fprintf(w, ", last contact with the leader %s ago", here.LastContact)
				}
				fmt.Fprintln(w)
			})
		},
	})
	rf.AddCommand(removePeerCmd(g), transferLeaderCmd(g), recoverCmd(g))
	op.AddCommand(rf, sealKeyCmd(g), credentialCmd(g))
	return op
}

// writeNodeView is `meshd node show`'s text: the node's record, then its host's last report.
func writeNodeView(w io.Writer, v api.NodeView) {
	n := v.Node
	mode := string(n.Mode)
	if n.Mode == fsm.Adopted {
		mode = "ADOPTED (found files and containers are held until their module is taken)"
	}
	fmt.Fprintf(w, "node\t%s\n", n.Name)
	fmt.Fprintf(w, "id\t%s\n", n.ID)
	fmt.Fprintf(w, "mode\t%s, since %s\n", mode, n.ModeSince.Format("2006-01-02 15:04:05Z07:00"))
	role := "client"
	if n.Server {
		role = "server"
	}
	if v.ControlNode {
		role += ", control-node"
	}
	fmt.Fprintf(w, "role\t%s\n", role)
	fmt.Fprintf(w, "address\t%s\n", n.Address)
	fmt.Fprintf(w, "advertise\t%s\n", n.Advertise)
	fmt.Fprintf(w, "assigned\t%s\n", list(n.Assigned))
	fmt.Fprintf(w, "taken\t%s\n", list(v.Taken))
	for i, k := range sortedKeys(n.Settings) {
		label := ""
		if i == 0 {
			label = "settings"
		}
		fmt.Fprintf(w, "%s\t%s=%s\n", label, k, n.Settings[k])
	}
	printReport(w, v.Report)
}
