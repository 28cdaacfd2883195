package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"meshd/api"
	"meshd/fsm"
	"meshd/report"
)

// exitStatus ends the command with code and no message: what it had to say is printed. The
// converge preview exits 2 when something will close (terraform's -detailed-exitcode).
type exitStatus struct{ code int }

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitCodeOf is the process's exit code for err: its exitStatus's, else 1.
func exitCodeOf(err error) (int, bool) {
	var es exitStatus
	if errors.As(err, &es) {
		return es.code, true
	}
	return 1, false
}

// convergeCmd is `meshd converge NODE --preview` (what converging the node will do to what is
// reachable on it, changing nothing) and `meshd converge NODE [--plan TOKEN]`, the flip.
func convergeCmd(g *globals) *cobra.Command {
	var preview, acceptLoss bool
	var plan string
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "converge NODE [--preview | --plan TOKEN] [--accept-loss]",
		Short: "Converge a node (its migration's last step): preview what closes, then flip it in one act",
		Long: `Converging a node is the last step of its migration, one act: every assigned module taken,
meshd's derived filter loaded, the found firewall retired by disabling it (never flushing: its
configuration stays on disk, the container engine's rules stay).

--preview changes nothing. It works from what is reachable on the node now (its latest host
report), not from the found firewall's allow list: every socket listening on a non-loopback address
(address, port, protocol, process and pid) and every container port published on one (meshd's
containers or not), each marked "declared by MODULE" (an opening of an assigned module on that port
and protocol; the mesh's own ports are declared by mesh) or "will close". It also lists the modules
the flip will take, the found firewall it will retire and how (ufw: ` + "`ufw disable`" + `; nftables: its
tables moved aside; plain iptables: its own rules saved and removed), and the derived filter meshd
will load, as nft prints it; it ends with a plan token, a digest of what it saw and decided (pids and the time left out).
Exit codes: 0 when nothing will close, 2 when something will, 1 on error. On a node already
converged it says so and gives no plan token (--json: "converged": true, "token": ""), exit 0:
there is nothing to flip.

Without --preview it flips the node. With --plan TOKEN (the preview's) it is refused when the node
changed since that preview (something new listening, a module assigned since, the found firewall
changed, a rule of the filter), naming what changed; without --plan it is refused when anything will
close. The flip is recorded as an intent first; the node then carries it out and the record says
converged once the node reports it done (a node that dies halfway finishes after a restart). The
command follows the node until then (--wait; --no-wait returns once the intent is recorded): exit 0
once converged, 1 on a refusal or when the wait ends first (the intent stays in the record and the
node still finishes it). Step back with ` + "`meshd adopt NODE`" + `.

The modules the flip takes replace their held containers as ` + "`meshd module take`" + ` does: the preview
lists, marked LOSS, what a found container would lose that its module does not declare (a network,
an alias, a capability, its user, a limit, its health check, what no manifest can say), and the flip
is refused while there is any unless --accept-loss says the operator accepts them; what was accepted
is recorded in the history with who accepted it.`,
		Args: exactArgs("NODE"),
		RunE: func(_ *cobra.Command, args []string) error {
			if preview {
				return convergePreview(g, args[0])
			}
			return converge(g, args[0], plan, acceptLoss, wf)
		},
	}
	cmd.Flags().BoolVar(&preview, "preview", false, "list what converging the node will close, retire and load; change nothing (exit 0: nothing closes, 2: something will)")
	cmd.Flags().StringVar(&plan, "plan", "", "the plan token of the preview you read: the flip is refused if the node changed since")
	cmd.Flags().BoolVar(&acceptLoss, "accept-loss", false, "flip even though found containers of the modules it takes lose what the preview marks LOSS (recorded in the history)")
	wf.add(cmd, "the flip")
	return cmd
}

func convergePreview(g *globals, node string) error {
	ctx, cancel := g.ctx()
	defer cancel()
	var pv report.ConvergePreview
	if err := g.client().Get(ctx, fmt.Sprintf("/v1/nodes/%s/converge-preview", url.PathEscape(node)), &pv); err != nil {
		return err
	}
	if err := g.emit(pv, func(w io.Writer) { writeConvergePreview(w, pv) }); err != nil {
		return err
	}
	if pv.WillClose > 0 && !pv.Converged {
		return exitStatus{code: 2}
	}
	return nil
}

func converge(g *globals, node, plan string, acceptLoss bool, wf waitFlags) error {
	ctx, cancel := g.ctx()
	defer cancel()
	var fv api.FlipView
	if err := g.client().Post(ctx, fmt.Sprintf("/v1/nodes/%s/converge", url.PathEscape(node)), api.ConvergeRequest{Plan: plan, AcceptLoss: acceptLoss}, &fv); err != nil {
		return err
	}
	if wf.noWait {
		return g.emit(fv, func(w io.Writer) {
			fmt.Fprintf(w, "flip of %s to converged recorded (plan %s); the node carries it out (follow it with `meshd node show %s`)\n", node, fv.Preview.Token, node)
		})
	}
	if !g.json {
		fmt.Fprintf(g.out, "flip of %s to converged recorded (plan %s); waiting for the node to carry it out\n", node, fv.Preview.Token)
	}
	return waitFlip(g, node, fsm.Converged, wf.wait)
}

// adoptCmd is `meshd adopt NODE`: a converged node returned to adopted.
func adoptCmd(g *globals) *cobra.Command {
	var wf waitFlags
	cmd := &cobra.Command{
		Use:   "adopt NODE",
		Short: "Return a converged node to adopted: the retired firewall enabled again, meshd's filter unloaded",
		Long: `Steps a converged node back to adopted, in one act: the found firewall meshd retired is
enabled again from its configuration on disk (ufw: ` + "`ufw --force enable`" + `; nftables: its tables
loaded from what was saved when it was retired; plain iptables: its saved rules appended back in
order), then the guard is loaded and meshd's derived filter unloaded. Nothing taken is un-taken: the modules taken stay taken.

Like the flip it is recorded as an intent first; the node carries it out (also after a restart) and
the record says adopted once the node reports it done. The command follows the node until then
(--wait; --no-wait returns once the intent is recorded): exit 0 once adopted, 1 on a refusal (the
node is already adopted) or when the wait ends first.`,
		Args: exactArgs("NODE"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := g.ctx()
			defer cancel()
			var fv api.FlipView
			if err := g.client().Post(ctx, fmt.Sprintf("/v1/nodes/%s/adopt", url.PathEscape(args[0])), nil, &fv); err != nil {
				return err
			}
			if wf.noWait {
				return g.emit(fv, func(w io.Writer) {
					fmt.Fprintf(w, "return of %s to adopted recorded; the node carries it out (follow it with `meshd node show %s`)\n", args[0], args[0])
				})
			}
			if !g.json {
				fmt.Fprintf(g.out, "return of %s to adopted recorded; waiting for the node to carry it out\n", args[0])
			}
			return waitFlip(g, args[0], fsm.Adopted, wf.wait)
		},
	}
	wf.add(cmd, "the return")
	return cmd
}

// flipStep says what a flip or a return waits for, as the node's last report says it.
func flipStep(nv api.NodeView, mode fsm.Mode) string {
	name := nv.Node.Name
	switch {
	case nv.Report == nil:
		return fmt.Sprintf("waiting for node %s's first report", name)
	case report.ReportFlip(nv.Report) != nil && report.ReportFlip(nv.Report).Waiting != "":
		return fmt.Sprintf("node %s becoming %s: %s", name, mode, report.ReportFlip(nv.Report).Waiting)
	case nv.Node.Flip != nil:
		return fmt.Sprintf("node %s becoming %s: its agent carries the intent out", name, mode)
	}
	return fmt.Sprintf("node %s is %s; the record follows its report", name, mode)
}

// waitFlip follows the node until the record holds it in mode with no flip pending, then prints
// the node's firewall as its report says.
func waitFlip(g *globals, node string, mode fsm.Mode, wait time.Duration) error {
	check := func(nv api.NodeView) (bool, string, error) {
		if nv.Node != nil && nv.Node.Mode == mode && nv.Node.Flip == nil {
			return true, fmt.Sprintf("node %s is %s", node, mode), nil
		}
		return false, flipStep(nv, mode), nil
	}
	late := func(last api.NodeView) error {
		why := "no report from the node yet"
		if f := report.ReportFlip(last.Report); f != nil && f.Waiting != "" {
			why = f.Waiting
		} else if last.Report != nil {
			why = "the node's last report (" + last.Report.When.Format(time.RFC3339) + ") does not say it is done"
		}
		return fmt.Errorf("node %s is not %s after %s: %s; the intent stays in the record and the node finishes it (see `meshd node show %s`)", node, mode, wait, why, node)
	}
	nv, err := g.follow(g.progress(), node, wait, check, late)
	if err != nil {
		return err
	}
	return g.emit(nv.Node, func(w io.Writer) { writeFlipped(w, nv) })
}

func writeFlipped(w io.Writer, nv api.NodeView) {
	fmt.Fprintf(w, "%s is %s (since %s)\n", nv.Node.Name, nv.Node.Mode, nv.Node.ModeSince.Format(time.RFC3339))
	if nv.Report == nil {
		return
	}
	var od report.OpeningDetail
	if b, err := json.Marshal(nv.Report.Kinds[fsm.KindOpening]); err == nil && json.Unmarshal(b, &od) == nil {
		fmt.Fprintf(w, "found firewall\t%s\n", od.Firewall.Description)
		if od.Retired != nil {
			fmt.Fprintf(w, "retired by meshd\t%s at %s; comes back by %s\n", od.Retired.Found, od.Retired.At.Format(time.RFC3339), od.Retired.Restore)
		}
		if od.Filter != nil {
			fmt.Fprintf(w, "meshd's filter\t%s %s\n", od.Filter.Table, od.Filter.State)
		}
		if od.Guard != nil {
			fmt.Fprintf(w, "meshd's guard\t%s %s\n", od.Guard.Table, od.Guard.State)
		}
	}
}

func writeConvergePreview(w io.Writer, pv report.ConvergePreview) {
	if pv.Converged {
		writeConverged(w, pv)
		return
	}
	fmt.Fprintf(w, "converging %s (%s) will (from its report of %s):\n", pv.Node, pv.Mode, pv.ReportAt.Format("2006-01-02T15:04:05Z07:00"))
	for _, l := range pv.Listeners {
		proc := "-"
		if l.Process != "" {
			proc = fmt.Sprintf("%s (pid %d)", l.Process, l.PID)
		}
		fmt.Fprintf(w, "listening\t%s %s\t%s\t%s\n", l.Proto, hostPort(l.Addr.String(), l.Port), proc, l.Verdict)
	}
	for _, p := range pv.Published {
		fmt.Fprintf(w, "published\t%s %s\tcontainer %s\t%s\n", p.Proto, hostPort(p.HostIP, p.HostPort), p.Container, p.Verdict)
	}
	if len(pv.Listeners)+len(pv.Published) == 0 {
		fmt.Fprintln(w, "nothing listens or is published on a non-loopback address")
	}
	fmt.Fprintf(w, "take\t%s\t\t\n", list(pv.Take))
	for _, l := range pv.Losses {
		fmt.Fprintf(w, "\tLOSS: %s\t\t\n", l)
	}
	if pv.Tunnel != "" {
		fmt.Fprintf(w, "tunnel\t%s\t\t\n", pv.Tunnel)
	}
	fw := pv.Firewall.Kind
	if pv.Firewall.Description != "" {
		fw = pv.Firewall.Description
	}
	// Its cells are not a column's: the firewall's description would widen every row's.
	fmt.Fprintf(w, "retire\t%s: %s\n", fw, pv.Firewall.Retire)
	if pv.FilterError != "" {
		fmt.Fprintf(w, "filter\t%s\t\t\n", pv.FilterError)
	} else {
		fmt.Fprintln(w, "the derived filter meshd will load (drop by default, IPv4 and IPv6):")
		for _, l := range strings.Split(strings.TrimRight(pv.Filter, "\n"), "\n") {
			fmt.Fprintln(w, "    "+strings.ReplaceAll(l, "\t", "    "))
		}
	}
	if pv.WillClose > 0 {
		fmt.Fprintf(w, "%d will close\t\t\t\n", pv.WillClose)
	} else {
		fmt.Fprintln(w, "nothing will close\t\t\t")
	}
	fmt.Fprintf(w, "plan token\t%s\t\t\n", pv.Token)
}

// writeConverged is the preview of a node already converged: no plan to give, what to do instead.
func writeConverged(w io.Writer, pv report.ConvergePreview) {
	fmt.Fprintf(w, "%s is already converged: nothing to flip, so no plan token\n", pv.Node)
	fmt.Fprintf(w, "what reaches it: `meshd node show %s`; to step it back: `meshd adopt %s`\n", pv.Node, pv.Node)
}

// hostPort is "addr:port", an IPv6 address in brackets; an empty address is the unspecified one.
func hostPort(addr string, port uint16) string {
	if addr == "" {
		addr = "0.0.0.0"
	}
	return net.JoinHostPort(addr, fmt.Sprint(port))
}
