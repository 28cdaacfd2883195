package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"meshd/api"
	"meshd/fsm"
	"meshd/gossip"
	"meshd/report"
)

// Every agent serves Prometheus metrics at /metrics on its operator socket, and on the TCP
// addresses --metrics names (loopback or the private network; an underlay address only with
// --metrics-underlay). What they show is read at scrape time from where it already lives: the
// host reports (this node's own; on a server every node's, as status shows them), gossip's
// members and rejected reports, and Raft's state. Only what is measured as it happens is kept
// here: each reconcile pass's time and failures per resource kind, and each commit's time.

// metrics is one agent's registry: its own, never the process-wide default, so that several
// agents in one process (the tests) each show their own.
type metrics struct {
	reg        *prometheus.Registry
	passes     *prometheus.CounterVec
	passErrors *prometheus.CounterVec
	passTime   *prometheus.HistogramVec
	commitTime prometheus.Histogram
}

// newMetrics is an agent's registry: its own figures, and at each scrape what its gossip member
// and its kind's views (read through views, set once the kind is made) show.
func newMetrics(g gossipReader, views *roleViews) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshd_reconcile_passes_total",
			Help: "Reconcile passes of this node's host, by resource kind."}, []string{"kind"}),
		passErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshd_reconcile_errors_total",
			Help: "Resources that failed in this node's reconcile passes, by resource kind."}, []string{"kind"}),
		passTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "meshd_reconcile_duration_seconds",
			Help:    "How long each resource kind's part of a reconcile pass took on this node.",
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"kind"}),
		commitTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshd_raft_commit_duration_seconds",
			Help:    "How long a command this server proposed took to commit and apply.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}),
	}
	m.reg.MustRegister(m.passes, m.passErrors, m.passTime, m.commitTime, reportCollector{gossip: g, views: views},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observePass is the host's Config.Observe.
func (m *metrics) observePass(kind string, took time.Duration, failed int) {
	m.passes.WithLabelValues(kind).Inc()
	m.passErrors.WithLabelValues(kind).Add(float64(failed))
	m.passTime.WithLabelValues(kind).Observe(took.Seconds())
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

var (
	descHeld = prometheus.NewDesc("meshd_held_resources",
		"Found resources a node keeps as they are, by kind (file, container), from its last host report.", []string{"node", "kind"}, nil)
	descChanged = prometheus.NewDesc("meshd_held_changed_resources",
		"Held resources changed or removed by something else, by kind, from the node's last host report.", []string{"node", "kind"}, nil)
	descOpenings = prometheus.NewDesc("meshd_openings",
		"A node's openings by state (in_force, restored, failed), from its last host report.", []string{"node", "state"}, nil)
	descTunnelPeers = prometheus.NewDesc("meshd_tunnel_peers",
		"Peers of a node's tunnel, carried (not enrolled yet) or not, from its last host report.", []string{"node", "carried"}, nil)
	descTunnelState = prometheus.NewDesc("meshd_tunnel_state",
		"1 for the state a node's tunnel is in (found-up, mesh-up, found-down-mesh-not-up), 0 for the others, from its last host report.", []string{"node", "state"}, nil)
	descFirewallAgain = prometheus.NewDesc("meshd_found_firewall_active_again",
		"1 when the node's last host report reads the found firewall meshd retired at the flip active again, else 0.", []string{"node"}, nil)
	descHandshake = prometheus.NewDesc("meshd_tunnel_peer_last_handshake_age_seconds",
		"Seconds since a tunnel peer's last WireGuard handshake, as of the node's last host report.", []string{"node", "peer"}, nil)
	descReportAge = prometheus.NewDesc("meshd_host_report_age_seconds",
		"Seconds since the node's last host report this agent has.", []string{"node"}, nil)
	descMembers = prometheus.NewDesc("meshd_gossip_members",
		"Gossip members this agent sees, by state (alive, failed, left).", []string{"state"}, nil)
	descRejected = prometheus.NewDesc("meshd_gossip_rejected_reports_total",
		"Host reports this agent's gossip member rejected, by reason.", []string{"reason"}, nil)
	descRefused = prometheus.NewDesc("meshd_gossip_rejected_total",
		"Datagrams and connections on the gossip port refused before any gossip key let them in (junk, a wrong key), by kind.", []string{"kind"}, nil)
	descLeader = prometheus.NewDesc("meshd_raft_leader",
		"1 on the server that leads the Raft group, else 0.", nil, nil)
	descLastContact = prometheus.NewDesc("meshd_raft_last_contact_seconds",
		"Seconds since this server last heard from the leader (0 on the leader).", nil, nil)
	descCommitIndex = prometheus.NewDesc("meshd_raft_commit_index",
		"The Raft log index this server knows committed.", nil, nil)
)

// reportCollector reads the node's reports, gossip and Raft at scrape time.
type reportCollector struct {
	gossip gossipReader
	views  *roleViews
}

// reportDescs are the collector's own metrics; boardDescs are the board's.
var reportDescs = []*prometheus.Desc{descHeld, descChanged, descOpenings, descTunnelPeers, descTunnelState,
	descFirewallAgain, descHandshake, descReportAge, descMembers, descRejected, descRefused, descLeader, descLastContact,
	descCommitIndex}

func (c reportCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range append(append([]*prometheus.Desc{}, reportDescs...), boardDescs...) {
		ch <- d
	}
}

func (c reportCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	views := *c.views
	if views == nil {
		return // a scrape before the kind is made: nothing to show yet
	}
	for node, rep := range views.metricReports() {
		collectReport(ch, node, rep, now)
	}
	members := map[string]int{"alive": 0, "failed": 0, "left": 0, "removed": 0}
	for _, m := range c.gossip.membersByName() {
		members[string(m.State)]++
	}
	for state, n := range members {
		ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(n), state)
	}
	if g := c.gossip.member(); g != nil {
		for reason, n := range g.Rejected() {
			ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(n), string(reason))
		}
		refused := g.Refused()
		for _, kind := range gossip.RefusedKinds() {
			ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(refused[kind]), kind)
		}
	}
	views.collectRole(ch)
}

// collectRole: a server's Raft state.
func (s *serverRole) collectRole(ch chan<- prometheus.Metric) {
	if !s.rec.Started() {
		return
	}
	st := s.rec.Figures()
	leader, contact := 0.0, 0.0
	if st.State == raft.Leader {
		leader = 1
	} else if !st.LastContact.IsZero() {
		contact = time.Since(st.LastContact).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(descLastContact, prometheus.GaugeValue, contact)
	ch <- prometheus.MustNewConstMetric(descCommitIndex, prometheus.GaugeValue, float64(st.CommitIndex))
	collectBoard(ch, s.fleet.board())
}

// collectReport turns one node's host report into its gauges.
func collectReport(ch chan<- prometheus.Metric, node string, rep *report.Report, now time.Time) {
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), append([]string{node}, labels...)...)
	}
	ch <- prometheus.MustNewConstMetric(descReportAge, prometheus.GaugeValue, now.Sub(rep.When).Seconds(), node)
	changedFiles := 0
	for _, f := range rep.Held {
		if f.Changed {
			changedFiles++
		}
	}
	gauge(descHeld, len(rep.Held), fsm.KindFile)
	gauge(descChanged, changedFiles, fsm.KindFile)
	var cr report.ContainerReport
	if raw, ok := rep.Kinds[fsm.KindContainer]; ok && api.DecodeInto(raw, &cr) {
		held, changed := 0, 0
		for _, c := range cr.Containers {
			if c.State == "held" {
				held++
				if c.Changed {
					changed++
				}
			}
		}
		gauge(descHeld, held, fsm.KindContainer)
		gauge(descChanged, changed, fsm.KindContainer)
	}
	var od report.OpeningDetail
	if raw, ok := rep.Kinds[fsm.KindOpening]; ok && api.DecodeInto(raw, &od) {
		states := map[string]int{report.OpeningInForce: 0, report.OpeningRestored: 0, report.OpeningFailed: 0}
		for _, o := range od.Openings {
			states[o.State]++
		}
		for state, n := range states {
			gauge(descOpenings, n, strings.ReplaceAll(state, " ", "_"))
		}
		gauge(descFirewallAgain, oneIf(od.Firewall.ActiveAgain))
	}
	var td report.TunnelDetail
	if raw, ok := rep.Kinds[fsm.KindTunnel]; ok && api.DecodeInto(raw, &td) && td.State != "" {
		carried, enrolled := 0, 0
		for _, p := range td.Peers {
			if p.Carried {
				carried++
			} else {
				enrolled++
			}
			if !p.LastHandshake.IsZero() {
				name := p.Name
				if name == "" {
					name = p.PublicKey
				}
				ch <- prometheus.MustNewConstMetric(descHandshake, prometheus.GaugeValue, rep.When.Sub(p.LastHandshake).Seconds(), node, name)
			}
		}
		gauge(descTunnelPeers, carried, "true")
		gauge(descTunnelPeers, enrolled, "false")
		// One-hot over the report's three words, which `meshd node show` prints too.
		for _, state := range []string{report.TunnelFoundUp, report.TunnelMeshUp, report.TunnelDark} {
			gauge(descTunnelState, oneIf(td.State == state), state)
		}
	}
}

// oneIf is a gauge's 1 for true, 0 for false.
func oneIf(b bool) int {
	if b {
		return 1
	}
	return 0
}

// metricReports: a server shows every node of the record whose report it has.
func (s *serverRole) metricReports() map[string]*report.Report { return s.fleet.reports() }

// collectRole: a client runs no Raft.
func (c *clientRole) collectRole(chan<- prometheus.Metric) {}

// statusPage: a client has none; its servers' pages show it.
func (c *clientRole) statusPage() http.Handler { return nil }

// metricReports: a client shows its own report only.
func (c *clientRole) metricReports() map[string]*report.Report {
	rep := c.host.Report()
	if rep.When.IsZero() {
		return nil
	}
	return map[string]*report.Report{c.node.Name: &rep}
}

// checkMetricsAddr refuses a TCP address for /metrics that is neither loopback nor in the private
// network's range, unless underlay is set: the metrics name every node, port and peer of the mesh.
func checkMetricsAddr(addr, privateRange string, underlay bool) error {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("metrics address %s: %w (want HOST:PORT, e.g. 127.0.0.1:9470)", addr, err)
	}
	ip := net.ParseIP(h)
	if ip == nil {
		return fmt.Errorf("metrics address %s: %q is not an IP address", addr, h)
	}
	if ip.IsLoopback() || underlay {
		return nil
	}
	if _, n, err := net.ParseCIDR(privateRange); err == nil && n.Contains(ip) {
		return nil
	}
	if privateRange == "" {
		return fmt.Errorf("metrics address %s: not loopback, and this node does not know the private network's range yet; give --metrics-underlay to serve metrics off the private network", addr)
	}
	return fmt.Errorf("metrics address %s: neither loopback nor in the private network %s; give --metrics-underlay to serve metrics there", addr, privateRange)
}

// withMetrics serves /metrics (and the log monitor, monitor.go) beside the operator's API on the
// socket: both are the local agent's on either role.
func (a *Agent) withMetrics(api http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.mx.handler())
	mux.HandleFunc("GET /v1/monitor", a.getMonitor)
	mux.Handle("/", api)
	return mux
}

// serveMetrics serves /metrics on addr until ctx ends. An address in the private network waits
// for the node's declaration to name the range, and for the address to exist on the machine (the
// tunnel's address appears when its interface comes up); each wait is logged once.
func (a *Agent) serveMetrics(ctx context.Context, addr string) {
	log := a.log.With("part", "metrics", "addr", addr)
	var lastErr string
	for ctx.Err() == nil {
		rng, _ := a.privateRange.Load().(string)
		err := checkMetricsAddr(addr, rng, a.cfg.MetricsUnderlay)
		if err != nil && rng != "" {
			log.Error("metrics not served at this address", "err", err)
			return
		}
		var ln net.Listener
		if err == nil {
			ln, err = net.Listen("tcp", addr)
		}
		if err != nil {
			if err.Error() != lastErr {
				log.Warn("metrics: waiting to serve; retrying", "err", err)
				lastErr = err.Error()
			}
			sleepCtx(ctx, 2*time.Second)
			continue
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", a.mx.handler())
		if page := a.views.statusPage(); page != nil {
			mux.Handle("/", page)
		}
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = hs.Shutdown(sctx)
		}()
		log.Info("metrics listening")
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics stopped", "err", err)
		}
		return
	}
}
