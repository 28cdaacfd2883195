package main

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"meshd/api"
	"meshd/report"
)

// waitFlags are the flags of a command that records an act and then follows the node carrying it
// out (converge, adopt, module take, tunnel take): --wait bounds the following, --no-wait returns
// once the record holds the act.
type waitFlags struct {
	wait   time.Duration
	noWait bool
}

func (w *waitFlags) add(cmd *cobra.Command, what string) {
	cmd.Flags().DurationVar(&w.wait, "wait", 2*time.Minute, "how long to follow the node carrying "+what+" out (exit 1 when it has not by then; the act stays in the record)")
	cmd.Flags().BoolVar(&w.noWait, "no-wait", false, "return once the record holds the act, without following the node carrying "+what+" out")
}

// follow is how those commands follow the node once the record holds the act: it reads node's
// record and last report (what `meshd node show` reads) four times a second and shows check's
// step as progress, until check says the act is done (the node's view is returned; a step given
// with done says what was carried out, ticked last) or failed (check's error). After wait it
// returns late's error, told the last view it read.
func (g *globals) follow(pr *progress, node string, wait time.Duration, check func(api.NodeView) (done bool, step string, err error), late func(last api.NodeView) error) (api.NodeView, error) {
	deadline := time.Now().Add(wait)
	var last api.NodeView
	for {
		ctx, cancel := g.ctx()
		var nv api.NodeView
		err := g.client().Get(ctx, "/v1/nodes/"+url.PathEscape(node), &nv)
		cancel()
		if err == nil {
			last = nv
			done, step, err := check(nv)
			if err != nil {
				pr.Done(false)
				return nv, err
			}
			if done {
				if step != "" {
					pr.Step(step) // what was carried out, ticked
				}
				pr.Done(true)
				return nv, nil
			}
			pr.Step(step)
		} else {
			pr.Step("waiting for an answer about node " + node + ": " + err.Error())
		}
		if time.Now().After(deadline) {
			pr.Done(false)
			return last, late(last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkCarried is follow's check for an act read from the node's report by carried (a take, a
// tunnel takeover): act names it in the steps and the errors ("the take of module web").
func checkCarried(node, act string, carried func(*report.Report) report.Carried) func(api.NodeView) (bool, string, error) {
	return func(nv api.NodeView) (bool, string, error) {
		if nv.Report == nil {
			return false, fmt.Sprintf("waiting for node %s's first report", node), nil
		}
		c := carried(nv.Report)
		switch {
		case !c.Seen:
			return false, fmt.Sprintf("waiting for node %s to pass with %s (its last report is of %s)", node, act, nv.Report.When.Format(time.RFC3339)), nil
		case len(c.Failed) > 0:
			var why []string
			for _, e := range c.Failed {
				why = append(why, e.Resource+": "+e.Reason)
			}
			return false, "", fmt.Errorf("node %s could not carry out %s: %s (its report of %s); the act stays in the record and the node tries again on its next passes (see `meshd node show %s`)",
				node, act, strings.Join(why, "; "), nv.Report.When.Format(time.RFC3339), node)
		case c.Done:
			return true, fmt.Sprintf("node %s carried out %s", node, act), nil
		}
		return false, fmt.Sprintf("node %s carrying out %s: %s", node, act, c.Waiting), nil
	}
}

// lateCarried is follow's error when the wait ends before the node reported the act carried out.
func lateCarried(node, act string, wait time.Duration, carried func(*report.Report) report.Carried) func(api.NodeView) error {
	return func(last api.NodeView) error {
		why := "no report from the node yet"
		if last.Report != nil {
			c := carried(last.Report)
			switch {
			case !c.Seen:
				why = "its last report (" + last.Report.When.Format(time.RFC3339) + ") is of a pass from before the act"
			case c.Waiting != "":
				why = c.Waiting
			}
		}
		return fmt.Errorf("node %s has not carried out %s after %s: %s; the act stays in the record and the node carries it out (see `meshd node show %s`)", node, act, wait, why, node)
	}
}
