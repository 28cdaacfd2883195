package main

// A module assigned or taken on many nodes: `meshd module assign MODULE --match 'web-*'` and
// `meshd module take MODULE --nodes a,b,c`, one command in the record, followed per node; and
// `meshd module status MODULE`, where it stands on each node.

import (
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"meshd/api"
	"meshd/report"
)

// smallFleet is how many nodes a listing shows one by one without being asked: past it, counts
// come first and the nodes listed are those not yet where they should be (or those asked for).
const smallFleet = 30

// manyFlags select the nodes of a many-node act; their union is the selection.
type manyFlags struct {
	nodes []string
	match []string
	all   bool
}

func (m *manyFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringSliceVar(&m.nodes, "nodes", nil, "act on these nodes (a,b,c); with MODULE as the only argument")
	cmd.Flags().StringArrayVar(&m.match, "match", nil, "act on the nodes whose names match this glob ('web-*', 'db-[0-9]'); repeatable")
	cmd.Flags().BoolVar(&m.all, "all", false, "act on every node in the record")
}

func (m *manyFlags) given() bool { return len(m.nodes) > 0 || len(m.match) > 0 || m.all }

// manyArgs is NODE MODULE for one node, MODULE alone with a selector.
func manyArgs(m *manyFlags) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if m.given() {
			if len(args) != 1 {
				return fmt.Errorf("%s with --nodes, --match or --all takes MODULE alone (got %d argument(s)); see `%s --help`", cmd.CommandPath(), len(args), cmd.CommandPath())
			}
			return nil
		}
		return exactArgs("NODE", "MODULE")(cmd, args)
	}
}

// manyResult is a many-node act's answer: what the record changed on each node, and where the
// module then stood on each node it changed.
type manyResult struct {
	Act      api.ModuleManyView   `json:"act"`
	Progress *api.ModuleNodesView `json:"progress,omitempty"`
}

// runMany records (or previews) action of module on the selected nodes and, unless noWait, follows
// the nodes it changed until each is in force or failed, or wf.wait passes.
func runMany(g *globals, action, module string, sel manyFlags, preview, acceptLoss bool, wf waitFlags) error {
	in := api.ModuleManyRequest{Nodes: sel.nodes, Match: sel.match, All: sel.all, Preview: preview, AcceptLoss: acceptLoss}
	ctx, cancel := g.ctx()
	defer cancel()
	var v api.ModuleManyView
	pr := g.progress()
	if !preview {
		pr.Step(fmt.Sprintf("recording the %s of %s on the selected nodes (one command, committed through Raft before the answer)", action, module))
	}
	if err := g.client().Post(ctx, "/v1/modules/"+url.PathEscape(module)+"/"+action, in, &v); err != nil {
		pr.Done(false)
		return err
	}
	res := manyResult{Act: v}
	var changed []string
	for _, n := range v.Nodes {
		if n.Change != api.ChangeNone {
			changed = append(changed, n.Node)
		}
	}
	if preview || len(changed) == 0 || wf.noWait {
		pr.Done(true)
		return g.emit(res, func(w io.Writer) { writeManyAct(w, v, nil) })
	}
	progress, err := g.followMany(pr, module, changed, wf.wait)
	res.Progress = progress
	if err != nil {
		if progress != nil && !g.json {
			_ = writeTable(g.out, g.width(), func(w io.Writer) { writeManyAct(w, v, progress) })
		}
		return err
	}
	return g.emit(res, func(w io.Writer) { writeManyAct(w, v, progress) })
}

// followMany reads where module stands on nodes four times a second until each is in force or
// failed; an error names every node that failed, or every node still pending when wait passes.
func (g *globals) followMany(pr *progress, module string, nodes []string, wait time.Duration) (*api.ModuleNodesView, error) {
	deadline := time.Now().Add(wait)
	path := "/v1/modules/" + url.PathEscape(module) + "/nodes?nodes=" + url.QueryEscape(strings.Join(nodes, ","))
	var last *api.ModuleNodesView
	for {
		ctx, cancel := g.ctx()
		var v api.ModuleNodesView
		err := g.client().Get(ctx, path, &v)
		cancel()
		if err == nil {
			last = &v
			pr.Step(fmt.Sprintf("%s on %d node(s): %s", module, len(nodes), stateCounts(v.Counts)))
			if v.Counts[report.Pending] == 0 {
				if failed := nodesIn(v, report.Failed); len(failed) > 0 {
					pr.Done(false)
					return last, fmt.Errorf("%s failed on %d of %d node(s) (the record holds it; each node tries again at its next pass):\n  %s",
						module, len(failed), len(nodes), strings.Join(failed, "\n  "))
				}
				pr.Done(true)
				return last, nil
			}
		} else {
			pr.Step("waiting for an answer about module " + module + ": " + err.Error())
		}
		if time.Now().After(deadline) {
			pr.Done(false)
			if last == nil {
				return nil, fmt.Errorf("no answer about module %s within %s: %v", module, wait, err)
			}
			return last, fmt.Errorf("%s not in force on every node within %s (the record holds it; the nodes carry it out; `meshd module status %s` follows them):\n  %s",
				module, wait, module, strings.Join(append(nodesIn(*last, report.Failed), nodesIn(*last, report.Pending)...), "\n  "))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// nodesIn lists the nodes of v in state, each with why.
func nodesIn(v api.ModuleNodesView, state string) []string {
	var out []string
	for _, n := range v.Nodes {
		if n.State == state {
			out = append(out, fmt.Sprintf("node %s: %s: %s", n.Node, n.State, n.Why))
		}
	}
	return out
}

// stateCounts says counts by state, in force first.
func stateCounts(counts map[string]int) string {
	var out []string
	for _, s := range []string{report.InForce, report.Pending, report.Failed} {
		out = append(out, fmt.Sprintf("%d %s", counts[s], s))
	}
	return strings.Join(out, ", ")
}

// writeManyAct writes what a many-node act touched: counts first, then each node with what
// changes there and, once followed, where the module stands (every node in a small fleet;
// otherwise those refused, failed or pending).
func writeManyAct(w io.Writer, v api.ModuleManyView, progress *api.ModuleNodesView) {
	head := fmt.Sprintf("%s %s %s: %d node(s): %s", v.Action, v.Module, v.Selector, len(v.Nodes), report.Counts(v.Counts))
	switch {
	case v.Preview:
		head = "preview (nothing changed): " + head
	case v.Index > 0:
		head += fmt.Sprintf("; recorded as one command at index %d", v.Index)
	default:
		head += "; nothing to record"
	}
	fmt.Fprintln(w, head)
	state := map[string]api.ModuleOnNode{}
	if progress != nil {
		for _, n := range progress.Nodes {
			state[n.Node] = n
		}
		fmt.Fprintf(w, "carried out: %s\n", stateCounts(progress.Counts))
	}
	fmt.Fprintln(w, "NODE\tMODE\tCHANGE\tSTATE\tWHY")
	for _, n := range v.Nodes {
		st, why := "", n.Why
		if s, ok := state[n.Node]; ok {
			st = s.State
			if s.Why != "" {
				why = s.Why
			}
		}
		if len(v.Nodes) > smallFleet && !v.Preview && (st == report.InForce || n.Change == api.ChangeNone) {
			continue
		}
		if n.TakeError != "" {
			why = n.TakeError
		}
		if len(n.Losses) > 0 {
			why = "LOSS: " + strings.Join(n.Losses, "; ")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", n.Node, n.Mode, n.Change, orDash(st), why)
	}
	if v.Preview && v.Action == "take" {
		for _, n := range v.Nodes {
			if n.Take != nil {
				fmt.Fprintln(w)
				writeTakePreview(w, *n.Take)
			}
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// moduleStatusCmd is `meshd module status MODULE`: where the module stands on each node it is
// assigned to, counted first.
func moduleStatusCmd(g *globals) *cobra.Command {
	var state string
	var nodes []string
	cmd := &cobra.Command{
		Use:   "status MODULE [--state STATE] [--nodes a,b]",
		Short: "Where a module stands on each node it is assigned to: in force, pending or failed",
		Long: `Status reads the record and each node's latest report: a module is in force on a node once the
node reported a pass with it as the record has it (assigned; taken and carried out) in which none of
its resources failed; pending until then; failed when that pass had one fail (the node's reason is
given; the node tries again at its next pass). Counts come first; --state and --nodes keep only
those nodes.`,
		Args: exactArgs("MODULE"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			q := url.Values{}
			if state != "" {
				q.Set("state", state)
			}
			if len(nodes) > 0 {
				q.Set("nodes", strings.Join(nodes, ","))
			}
			var v api.ModuleNodesView
			if err := g.client().Get(ctx, "/v1/modules/"+url.PathEscape(args[0])+"/nodes?"+q.Encode(), &v); err != nil {
				return err
			}
			return g.emit(v, func(w io.Writer) {
				fmt.Fprintf(w, "module %s on %d node(s): %s\n", v.Module, v.Counts[report.InForce]+v.Counts[report.Pending]+v.Counts[report.Failed], stateCounts(v.Counts))
				fmt.Fprintln(w, "NODE\tMODE\tTAKEN\tSTATE\tWHY")
				for _, n := range v.Nodes {
					taken := "no"
					if n.Taken {
						taken = "yes"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", n.Node, n.Mode, taken, n.State, n.Why)
				}
			})
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only the nodes in this state: 'in force', pending or failed")
	cmd.Flags().StringSliceVar(&nodes, "nodes", nil, "only these nodes (a,b,c)")
	return cmd
}

// manyLong is the help of a many-node act, said after the one-node command's.
func manyLong(action string) string {
	return `

On many nodes: ` + "`meshd module " + action + " MODULE --match 'web-*'`" + ` (globs, repeatable), --nodes a,b,c, --all,
or several (their union). The selection is resolved on the server to node names and recorded as one
command, all or nothing: a node the record refuses refuses the whole command, naming every refused
node and why, and nothing changes anywhere. A node that already has the module as asked is left
out and said unchanged, so the same command run again after new nodes joined acts on those alone.
--preview lists every node the ` + action + ` touches and what changes there (for a take, what it replaces
on each node and any LOSS), changing nothing; --json gives the same as data. Once recorded, each
node's agent acts as for one node, and the command follows them, printing the count in force,
pending and failed, until each is in force (exit 0) or failed (exit 1, naming each failed node and
its reason), or --wait passes (exit 1, naming the nodes not there yet). ` + "`meshd module status MODULE`" + `
follows them afterwards.`
}
