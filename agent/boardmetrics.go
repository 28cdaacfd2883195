package agent

// The board's metrics, read at scrape time on a server (board.Build over its record and
// reports): what an operator routes alerts on (docs/alerts.yml).

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"meshd/api"
	"meshd/fsm"
)

var (
	descNodesByStep = prometheus.NewDesc("meshd_nodes",
		"Nodes of the record by mode and by their next step (enrolled … converged; done once every step is).", []string{"mode", "step"}, nil)
	descAdoptedSeconds = prometheus.NewDesc("meshd_node_adopted_seconds",
		"Seconds each adopted node has been adopted (ADR 0100: one left behind is visible).", []string{"node"}, nil)
	descSteppedBack = prometheus.NewDesc("meshd_takes_stepped_back",
		"Takes the node's last host report says were stepped back (a cutover that failed and put back what was found).", []string{"node"}, nil)
	descOverdue = prometheus.NewDesc("meshd_host_report_overdue",
		"1 when the node's last host report is older than the board's overdue time (60 s) or there is none, else 0.", []string{"node"}, nil)
	descCarried = prometheus.NewDesc("meshd_carried_peers_not_enrolled",
		"Peers of the taken-over tunnel that have not enrolled as nodes yet.", nil, nil)
)

var boardDescs = []*prometheus.Desc{descNodesByStep, descAdoptedSeconds, descSteppedBack, descOverdue, descCarried}

// collectBoard writes the board's gauges.
func collectBoard(ch chan<- prometheus.Metric, b api.Board) {
	type key struct{ mode, step string }
	byStep := map[key]int{}
	for _, r := range b.Rows {
		step := r.Next
		if step == "" {
			step = "done"
		}
		// A module's step is named without the module: prepared, taken.
		if i := strings.IndexByte(step, ' '); i > 0 && (strings.HasPrefix(step, "prepared ") || strings.HasPrefix(step, "taken ")) {
			step = step[:i]
		}
		byStep[key{string(r.Mode), step}]++
		if r.Mode == fsm.Adopted {
			ch <- prometheus.MustNewConstMetric(descAdoptedSeconds, prometheus.GaugeValue, r.AdoptedFor.Seconds(), r.Node)
		}
		stepped, overdue := 0, 0
		for _, why := range r.Blocking {
			switch {
			case strings.Contains(why, "stepped back"):
				stepped++
			case strings.HasPrefix(why, "not heard from"), strings.HasPrefix(why, "no report"):
				overdue = 1
			}
		}
		ch <- prometheus.MustNewConstMetric(descSteppedBack, prometheus.GaugeValue, float64(stepped), r.Node)
		ch <- prometheus.MustNewConstMetric(descOverdue, prometheus.GaugeValue, float64(overdue), r.Node)
	}
	for k, n := range byStep {
		ch <- prometheus.MustNewConstMetric(descNodesByStep, prometheus.GaugeValue, float64(n), k.mode, k.step)
	}
	ch <- prometheus.MustNewConstMetric(descCarried, prometheus.GaugeValue, float64(b.CarriedNotEnrolled))
}
