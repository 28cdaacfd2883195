package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"meshd/api"
	"meshd/catalogue"
	"meshd/fsm"
	"meshd/report"
)

// moduleCmd declares the module subcommands (list, show, add, assign, unassign, take); long only
// because it is their declarations side by side, each a few lines calling the agent's API.
func moduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "module",
		Short: "The catalogue, and modules on nodes: list, show, add, confirm, draft, assign, unassign, take",
		Long: `Modules are the units of the catalogue: files, containers and openings, with settings.

On an adopted node, assigning a module only prepares it: what it declares that is not on the machine
is created; what is found there is held as it is. Taking the module is the cutover, done when its data
has moved: from then on its resources converge. On a converged node, assigning is taking.`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the catalogue's modules and where they are assigned",
		Long: `List prints one line a module of the catalogue: FOUNDATION "yes" for a module genesis raises on
the control-node, ASSIGNED TO the nodes it is assigned to (prepared there), TAKEN ON those where it
is also taken (its resources converge; on the others what is found is held), and its description.
"-" is none.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var mods []api.ModuleView
			if err := g.client().Get(ctx, "/v1/modules", &mods); err != nil {
				return err
			}
			return g.emit(mods, func(w io.Writer) { writeModules(w, mods) })
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "show MODULE",
		Short: "Show a module's manifest as the record holds it",
		Long: `Show prints a module as the record holds it: its description and source, a PRIVILEGED line for
each thing that makes it root on the machines it is assigned to (and who said it may be), the
nodes it is assigned to and taken on, its settings with their defaults (a node's own value is in
` + "`meshd node show NODE`" + `), and each file, container and opening it declares. With --json, the
manifest itself with assigned_to, taken_on and privilege.`,
		Args: exactArgs("MODULE"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var m api.ModuleView
			if err := g.client().Get(ctx, "/v1/modules/"+url.PathEscape(args[0]), &m); err != nil {
				return err
			}
			return g.emit(m, func(w io.Writer) {
				fmt.Fprintf(w, "module\t%s\n", m.Name)
				if m.Description != "" {
					fmt.Fprintf(w, "description\t%s\n", m.Description)
				}
				fmt.Fprintf(w, "source\t%s\n", m.Source)
				for _, line := range privilegedLines(m.Module, m.Privilege) {
					fmt.Fprintf(w, "PRIVILEGED\t%s\n", line)
				}
				fmt.Fprintf(w, "assigned to\t%s\n", list(m.AssignedTo))
				fmt.Fprintf(w, "taken on\t%s\n", list(m.TakenOn))
				for _, k := range sortedKeys(m.Settings) {
					fmt.Fprintf(w, "setting\t%s = %s (default)\n", k, m.Settings[k])
				}
				for _, f := range m.Files {
					fmt.Fprintf(w, "file\t%s\n", f.Path)
				}
				for _, c := range m.Containers {
					fmt.Fprintf(w, "container\t%s (image %s, ports %s)\n", c.Name, c.Image, list(c.Ports))
				}
				for _, o := range m.Openings {
					fmt.Fprintf(w, "opening\t%s/%s from %s, %s\n", o.Port, proto(o.Proto), o.From, o.Path)
				}
			})
		},
	})
	cmd.AddCommand(addCmd(g), confirmCmd(g), draftCmd(g))
	cmd.AddCommand(takeCmd(g), moduleStatusCmd(g))
	for _, c := range assignCmds(g) {
		cmd.AddCommand(c)
	}
	return cmd
}

// writeModules is module list's text: one module a line.
func writeModules(w io.Writer, mods []api.ModuleView) {
	fmt.Fprintln(w, "MODULE\tFOUNDATION\tASSIGNED TO\tTAKEN ON\tDESCRIPTION")
	for _, m := range mods {
		f := ""
		if m.Foundation {
			f = "yes"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", m.Name, f, list(m.AssignedTo), list(m.TakenOn), m.Description)
	}
}

// assignCmds are `meshd module assign` and `unassign`: one record change each, answered with the
// node as the record then holds it.
func assignCmds(g *globals) []*cobra.Command {
	var out []*cobra.Command
	for _, act := range []struct{ name, short, long, done string }{
		{"assign", "Assign a module to a node (on an adopted node: prepare; found things are held)",
			`Assign records the module on the node and returns once that is committed. The node acts on it
at its next pass, at once (a second or two): on an adopted node what the module declares and the
machine already has is held as found, what is missing is created. Until that pass's report
arrives, node show still shows the report before the assignment; module take --preview waits for it.`,
			"assigned to"},
		{"unassign", "Unassign a module from a node (held files stay where they are)", "", "unassigned from"},
	} {
		var sel manyFlags
		var preview bool
		var wf waitFlags
		c := &cobra.Command{
			Use:   act.name + " NODE MODULE",
			Short: act.short,
			Long:  act.long,
			Args:  exactArgs("NODE", "MODULE"),
			RunE: func(_ *cobra.Command, args []string) error {
				if act.name == "assign" && (sel.given() || preview) {
					if !sel.given() {
						sel.nodes, args = []string{args[0]}, args[1:]
					}
					return runMany(g, "assign", args[0], sel, preview, false, wf)
				}
				ctx, cancel := g.ctx()
				defer cancel()
				var n fsm.Node
				path := fmt.Sprintf("/v1/nodes/%s/modules/%s/%s", url.PathEscape(args[0]), url.PathEscape(args[1]), act.name)
				if err := g.client().Post(ctx, path, nil, &n); err != nil {
					return err
				}
				var warn []string
				if act.name == "assign" {
					warn = privilegedOf(ctx, g, args[1], n.Name)
				}
				return g.emit(n, func(w io.Writer) {
					fmt.Fprintf(w, "module %s %s node %s (%s): assigned %s; taken %s\n", args[1], act.done, n.Name, n.Mode, list(n.Assigned), list(n.EffectiveTaken()))
					for _, line := range warn {
						fmt.Fprintf(w, "PRIVILEGED: %s\n", line)
					}
				})
			},
		}
		if act.name == "assign" {
			c.Use = "assign NODE MODULE | assign MODULE (--nodes a,b | --match GLOB | --all) [--preview]"
			c.Args = manyArgs(&sel)
			c.Long += manyLong("assign")
			sel.add(c)
			c.Flags().BoolVar(&preview, "preview", false, "list each node the assign touches and what changes there; change nothing")
			wf.add(c, "the assign (with --nodes, --match or --all)")
		}
		out = append(out, c)
	}
	return out
}

func proto(p string) string {
	if p == "" {
		return "tcp"
	}
	return p
}

// takeCmd is `meshd module take`: the cutover of a module on an adopted node, or with --preview
// what it will replace there, read from the node's latest report without changing anything.
func takeCmd(g *globals) *cobra.Command {
	var preview, acceptLoss bool
	var wf waitFlags
	var sel manyFlags
	cmd := &cobra.Command{
		Use:   "take NODE MODULE | take MODULE (--nodes a,b | --match GLOB | --all) [--preview | --accept-loss] [--wait 2m | --no-wait]",
		Short: "Take a module on an adopted node: its cutover; from now on its resources converge",
		Long: `Take is the cutover of a module on an adopted node, done when its data has moved. The node's agent
prepares everything first (the new containers created, not started; the files rendered; the latest
bytes of every held file recorded beside its original), then cuts over: each found container is
stopped and kept aside, stopped, as NAME.meshd-replaced-<id>, the new one started, then the files
written. If the cutover fails, what was found is put back and the node's report says why.

The take is recorded first (committed through Raft); the command then follows the node until its
report says the take is carried out: a pass with the module taken that holds nothing of it as found
and in which none of its resources failed. Exit 0 then; 1 when the node reports a resource of the
module failed (the node, the resource and the node's reason are named; what was found is back in
place and the node tries the cutover again later), or when --wait ends first. --no-wait returns
once the take is recorded.

--preview lists what the take will replace on the node, changing nothing: each held container (found
id, image and what the declaration changes), each held file (recorded and current hash, changed by
something else or not), what it creates and the openings that start to be guarded. It reads the
node's latest report; right after module assign it waits (up to 5 s) for the first report made
after the assignment, and is refused when none comes (is the node's agent running?). Each
difference is in plain words, and one that loses something a service may depend on (a network, an
alias or a static address, a capability, its user, a limit, its health check, what no manifest can
say) is marked LOSS.

A take whose found containers would lose something is refused, naming each loss, unless
--accept-loss says the operator accepts them: the losses accepted are recorded in the record's
history with who accepted them (meshd history). Declaring them in the module instead makes the take
an adoption in place when nothing else differs.`,
		Args: manyArgs(&sel),
		RunE: func(_ *cobra.Command, args []string) error {
			if sel.given() {
				return runMany(g, "take", args[0], sel, preview, acceptLoss, wf)
			}
			ctx, cancel := g.ctx()
			defer cancel()
			base := fmt.Sprintf("/v1/nodes/%s/modules/%s/", url.PathEscape(args[0]), url.PathEscape(args[1]))
			if preview {
				var pv report.TakePreview
				if err := g.client().Get(ctx, base+"take-preview", &pv); err != nil {
					return err
				}
				warn := privilegedOf(ctx, g, args[1], args[0])
				return g.emit(pv, func(w io.Writer) {
					for _, line := range warn {
						fmt.Fprintf(w, "PRIVILEGED: %s\n", line)
					}
					writeTakePreview(w, pv)
				})
			}
			var n fsm.Node
			pr := g.progress()
			pr.Step(fmt.Sprintf("recording the take of %s on %s (committed through Raft before the answer)", args[1], args[0]))
			path := base + "take"
			if acceptLoss {
				path += "?accept_loss=true"
			}
			err := g.client().Post(ctx, path, nil, &n)
			if err != nil || wf.noWait {
				pr.Done(err == nil)
				if err != nil {
					return err
				}
				return g.emit(n, func(w io.Writer) {
					fmt.Fprintf(w, "take of module %s on node %s (%s) recorded: assigned %s; taken %s\n", args[1], n.Name, n.Mode, list(n.Assigned), list(n.EffectiveTaken()))
					fmt.Fprintf(w, "the node carries it out; follow it with `meshd node show %s`\n", n.Name)
				})
			}
			act := "the take of module " + args[1]
			carried := func(r *report.Report) report.Carried { return report.ReportTake(r, args[1]) }
			nv, err := g.follow(pr, args[0], wf.wait, checkCarried(args[0], act, carried), lateCarried(args[0], act, wf.wait, carried))
			if err != nil {
				return err
			}
			if nv.Node != nil {
				n = *nv.Node
			}
			return g.emit(n, func(w io.Writer) {
				fmt.Fprintf(w, "module %s taken on node %s (%s): assigned %s; taken %s\n", args[1], n.Name, n.Mode, list(n.Assigned), list(n.EffectiveTaken()))
				fmt.Fprintf(w, "carried out\tnode %s's report of %s holds nothing of %s as found\n", n.Name, nv.Report.When.Format(time.RFC3339), args[1])
			})
		},
	}
	cmd.Flags().BoolVar(&preview, "preview", false, "list what the take will replace on the node; change nothing")
	cmd.Flags().BoolVar(&acceptLoss, "accept-loss", false, "take even though the found containers lose what the preview marks LOSS (recorded in the history)")
	wf.add(cmd, "the take")
	sel.add(cmd)
	cmd.Long += manyLong("take")
	return cmd
}

func writeTakePreview(w io.Writer, pv report.TakePreview) {
	fmt.Fprintf(w, "taking %s on %s will (from its report of %s):\n", pv.Module, pv.Node, pv.ReportAt.Format(time.RFC3339))
	for _, c := range pv.Containers {
		what := "adopt in place (already the declaration)"
		if c.Aside != "" {
			what = fmt.Sprintf("replace; kept stopped as %s", c.Aside)
		}
		fmt.Fprintf(w, "container\t%s\tfound %s, image %s → %s\t%s\n", c.Name, short(c.FoundID), c.Image, c.NewImage, what)
		for _, d := range c.Differences {
			if slices.Contains(c.Losses, d) {
				d = "LOSS: " + d
			}
			fmt.Fprintf(w, "\t\t%s\t\n", d)
		}
		if c.Changed {
			fmt.Fprintf(w, "\t\t%s\t\n", c.Reason)
		}
	}
	for _, f := range pv.Files {
		state := "unchanged since found"
		if f.Changed {
			state = f.Reason + " (its latest bytes are kept too)"
		}
		fmt.Fprintf(w, "file\t%s\trecorded %s, now %s\t%s\n", f.Path, short(f.RecordedHash), short(f.CurrentHash), state)
	}
	for _, c := range pv.Created {
		fmt.Fprintf(w, "create\t%s\t\t\n", c)
	}
	for _, o := range pv.Guarded {
		fmt.Fprintf(w, "guard\t%s\t\t\n", o)
	}
	if len(pv.Containers)+len(pv.Files)+len(pv.Created)+len(pv.Guarded) == 0 {
		fmt.Fprintln(w, "nothing found to replace, nothing to create or guard")
	}
	if losses := pv.Losses(); len(losses) > 0 {
		fmt.Fprintf(w, "the take loses %d thing(s) marked LOSS: it is refused unless you accept them "+
			"(meshd module take %s %s --accept-loss), or declare them in the module\n", len(losses), pv.Node, pv.Module)
	}

}

// privilegedLines says, for a module that is root on a machine, who said it may be (or that no
// one has yet) and what makes it so, each with why (fsm.Record.RootEquivalent as the server
// read it; catalogue.RootEquivalent with its defaults when the server did not say): what show,
// add, confirm, assign and the take preview name loudly. Nothing for any other module.
func privilegedLines(m *catalogue.Module, p *api.ModulePrivilege) []string {
	if m == nil || (p == nil && !m.Privileged) {
		return nil
	}
	out := []string{"module " + m.Name + " is root on every machine it is assigned to"}
	var reaches []string
	switch {
	case p != nil && p.Unconfirmed:
		out[0] += "; added before the allowlist, it is UNCONFIRMED: it keeps working where it is " +
			"assigned, and is assigned nowhere more until an operator says so (meshd module confirm " + m.Name + ")"
		reaches = p.Reaches
	case p != nil:
		out[0] += "; said so by " + orOperator(p.By) + " at " + p.At.UTC().Format(time.RFC3339)
		reaches = p.Reaches
	default:
		out[0] += "; it says privileged: true"
		if r, err := m.Resolve(nil); err == nil {
			reaches = r.RootEquivalent()
		}
	}
	return append(out, reaches...)
}

// orOperator is who said a thing, or "an operator" when the record does not say.
func orOperator(by string) string {
	if by == "" {
		return "an operator"
	}
	return by
}

// privilegedOf is privilegedLines for the catalogue's module named module, said of node (if any); nothing
// when the module cannot be read (the command's own answer stands).
func privilegedOf(ctx context.Context, g *globals, module, node string) []string {
	// The command's own answer (its committed index) is what is said after it, not this read's.
	last := g.last
	defer func() { g.last = last }()
	var m api.ModuleView
	if err := g.client().Get(ctx, "/v1/modules/"+url.PathEscape(module), &m); err != nil || m.Module == nil {
		return nil
	}
	lines := privilegedLines(m.Module, m.Privilege)
	if len(lines) > 0 && node != "" {
		lines[0] = strings.Replace(lines[0], "is root on every machine it is assigned to", "is root on node "+node, 1)
	}
	return lines
}
