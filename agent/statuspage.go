package agent

// The status page: what an operator looks at instead of reading JSON. Every server agent serves
// it on the same plain-HTTP listeners as /metrics (--metrics HOST:PORT: loopback, or an address in
// the private network's range; never the underlay unless --metrics-underlay says so). It is
// server-rendered from html/template with its stylesheet and a few lines of script embedded in the
// binary: no front-end build, nothing fetched from anywhere. The page keeps itself current over
// server-sent events (GET /events): the server renders the page's live part again each time the
// record's index moves or a host report arrives (its own host's pass, gossip, a client's post)
// and sends it when it differs from what that page last got.
//
// The page reads this server's own record and reports (a follower's may be a few entries behind
// the leader's; the page says which server answered and whether it leads). It changes nothing:
// it has no forms and serves only GET.

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"meshd/agent/record"
	"meshd/api"
	"meshd/fsm"
	"meshd/report"
)

//go:embed statuspage
var pageFiles embed.FS

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"ago":   pageAgo,
	"short": func(s string) string { return shortKey(s) },
	"join":  strings.Join,
	"q":     url.QueryEscape,
	"count": func(n int, one, many string) string {
		if n == 1 {
			return "1 " + one
		}
		return strconv.Itoa(n) + " " + many
	},
	"has": func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	},
}).ParseFS(pageFiles, "statuspage/*.html"))

// PageOverview is the status page's front: every node, and the tunnel.
type PageOverview struct {
	ServedBy string
	Leader   string
	Leads    bool
	Index    uint64
	At       time.Time
	Nodes    []PageNode
	Tunnel   *api.TunnelView
	// Board is the first screen: where each node stands; History, beside it, the newest events
	// first (the last pageHistory).
	Board   api.Board
	History []fsm.Event
	// Privileged are the modules that are root on a machine, each reach with why; the
	// unconfirmed first.
	Privileged []api.ModulePrivilege
}

// pageSmallFleet is how many nodes the overview shows one by one (rows, cards, every board row);
// past it, the counts and the board rows of nodes not yet done, each node on its own page.
const pageSmallFleet = 30

// Large says the fleet is past pageSmallFleet.
func (v PageOverview) Large() bool { return len(v.Nodes) > pageSmallFleet }

// Counts says the nodes by mode and by liveness, in words.
func (v PageOverview) Counts() string {
	modes, live := map[string]int{}, map[string]int{}
	for _, n := range v.Nodes {
		modes[string(n.Mode)]++
		live[n.Liveness]++
	}
	return fmt.Sprintf("%d nodes: %s; %s", len(v.Nodes), report.Counts(modes), report.Counts(live))
}

// pageHistory is how many of the newest events the page shows beside the board.
const pageHistory = 50

// PageNode is one node as the page shows it.
type PageNode struct {
	Name        string
	Mode        fsm.Mode
	ModeSince   time.Time
	Role        string
	ControlNode bool
	Address     string
	Liveness    string
	Assigned    []string
	Taken       []string
	// From its last host report (Report nil: none yet).
	Report      *report.Report
	ReportFrom  string
	Held        []report.HeldFile
	Containers  []report.ContainerView
	EngineError string
	Firewall    report.FirewallView
	Openings    []report.OpeningView
	Tunnel      report.TunnelDetail
	// Preview is what a converge would do now (nil with PreviewError when it cannot be made).
	Preview      *report.ConvergePreview
	PreviewError string
}

// Changed counts the held files and containers changed by something else.
func (n PageNode) Changed() int {
	c := 0
	for _, f := range n.Held {
		if f.Changed {
			c++
		}
	}
	for _, x := range n.Containers {
		if x.Changed {
			c++
		}
	}
	return c
}

// HeldContainers counts the found containers the node keeps as they are.
func (n PageNode) HeldContainers() int {
	c := 0
	for _, x := range n.Containers {
		if x.State == report.ContainerHeld {
			c++
		}
	}
	return c
}

// WillClose lists what the converge preview marks as closing.
func (n PageNode) WillClose() []string {
	if n.Preview == nil {
		return nil
	}
	var out []string
	for _, l := range n.Preview.Listeners {
		if l.Verdict.Mark == report.MarkWillClose {
			out = append(out, l.Listener.String())
		}
	}
	for _, p := range n.Preview.Published {
		if p.Verdict.Mark == report.MarkWillClose {
			out = append(out, fmt.Sprintf("%s %s:%d (container %s)", p.Proto, p.HostIP, p.HostPort, p.Container))
		}
	}
	return out
}

// PageNodeDetail is a node's own page: the node, its last report as JSON.
type PageNodeDetail struct {
	PageOverview
	Node       PageNode
	ReportJSON string
}

// page is a server's status page: the overview, each node's page and their live streams, read
// from the record and the fleet's reports.
type page struct {
	self
	rec   *record.Service
	fleet *fleet
	// streams counts the live pages streamed now (pageMaxStreams bounds it).
	streams atomic.Int32
	// nodes keeps each node's part of the page while its report and the record stay.
	nodes pageNodes
}

// pageView builds the overview from this server's record and the reports it has; each node's
// part is built again only when its report or the record changed (pageNodes).
func (s *page) pageView() PageOverview {
	v := PageOverview{ServedBy: s.node.Name, At: time.Now(), Leads: s.rec.IsLeader()}
	v.Leader = s.rec.Leader().Node
	reports := s.fleet.stampedReports() // before the record: the fleet may ask gossip
	members := s.fleet.members()
	nodes := s.nodes.build(s.rec, reports, func(r *fsm.Record, index uint64) {
		v.Index = index
		v.Privileged = privilegedModules(r)
	})
	for _, pn := range nodes {
		pn.Liveness, _ = liveness(members, pn.Name)
		v.Nodes = append(v.Nodes, pn)
	}
	if tv := s.fleet.tunnel(); tv.Range != "" {
		v.Tunnel = &tv
	}
	v.Board = s.fleet.board()
	evs := historyView(s.rec, "", time.Time{}).Events
	for i := len(evs) - 1; i >= 0 && len(v.History) < pageHistory; i-- {
		v.History = append(v.History, evs[i])
	}
	return v
}

// pulse wakes every waiter at the next change: wait returns a channel fire closes.
type pulse struct {
	mu sync.Mutex
	ch chan struct{}
}

func (p *pulse) wait() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil {
		p.ch = make(chan struct{})
	}
	return p.ch
}

func (p *pulse) fire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil {
		close(p.ch)
		p.ch = nil
	}
}

// statusPage is the status page the metrics listeners serve beside /metrics.
func (s *serverRole) statusPage() http.Handler { return s.page.routes() }

// followReports fires the page's pulse after each of this node's own host passes (gossip and the
// bus fire it as reports arrive).
func (s *serverRole) followReports(ctx context.Context) {
	passed := s.host.Passed()
	for {
		select {
		case <-ctx.Done():
			return
		case <-passed:
			s.pulse.fire()
		}
	}
}

// pageRefresh bounds how long a page goes without being rendered again, for what changes without
// a record entry or a report: gossip liveness, and the ages the page shows.
const pageRefresh = 2 * time.Second

// routes are the status page's; they are relative to the listener's root.
func (s *page) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, req *http.Request) {
		s.renderPage(w, "overview", s.pageView(), "/events")
	})
	mux.HandleFunc("GET /node/{node}", func(w http.ResponseWriter, req *http.Request) {
		d, ok := s.pageDetail(req.PathValue("node"))
		if !ok {
			http.Error(w, fmt.Sprintf("node %s: no such node in the record", req.PathValue("node")), http.StatusNotFound)
			return
		}
		s.renderPage(w, "node", d, "/events?node="+url.QueryEscape(d.Node.Name))
	})
	mux.HandleFunc("GET /events", s.pageEvents)
	mux.HandleFunc("GET /page.css", func(w http.ResponseWriter, _ *http.Request) {
		b, _ := pageFiles.ReadFile("statuspage/page.css")
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		_, _ = w.Write(b)
	})
	return mux
}

// pageDetail is node's page, false when the record has no such node.
func (s *page) pageDetail(name string) (PageNodeDetail, bool) {
	ov := s.pageView()
	for _, n := range ov.Nodes {
		if n.Name == name {
			d := PageNodeDetail{PageOverview: ov, Node: n}
			if n.Report != nil {
				b, _ := json.MarshalIndent(n.Report, "", "  ")
				d.ReportJSON = string(b)
			}
			return d, true
		}
	}
	return PageNodeDetail{}, false
}

// renderPage writes a whole page: the layout around the live part named live.
func (s *page) renderPage(w http.ResponseWriter, live string, data any, events string) {
	var body bytes.Buffer
	if err := pageTmpl.ExecuteTemplate(&body, live, data); err != nil {
		http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	var out bytes.Buffer
	err := pageTmpl.ExecuteTemplate(&out, "layout", map[string]any{"Title": "meshd · " + s.node.Name, "Events": events,
		"Live": template.HTML(body.String())}) //nolint:gosec // our own template's output
	if err != nil {
		http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = out.WriteTo(w)
}

// pageMaxStreams is how many live pages one server streams at once: each holds a goroutine and
// renders the page on every change, and the listener asks no credential, so a caller opening
// streams without end would cost the server without end.
const pageMaxStreams = 32

// pageEvents streams the live part of the overview (or of ?node=NAME's page) each time it changes.
func (s *page) pageEvents(w http.ResponseWriter, req *http.Request) {
	if s.streams.Add(1) > pageMaxStreams {
		s.streams.Add(-1)
		http.Error(w, fmt.Sprintf("this server streams %d live pages already: close one, or reload later", pageMaxStreams), http.StatusServiceUnavailable)
		return
	}
	defer s.streams.Add(-1)
	node := req.URL.Query().Get("node")
	render := func() ([]byte, uint64, error) {
		var b bytes.Buffer
		if node == "" {
			v := s.pageView()
			err := pageTmpl.ExecuteTemplate(&b, "overview", v)
			return b.Bytes(), v.Index, err
		}
		d, ok := s.pageDetail(node)
		if !ok {
			return nil, 0, fmt.Errorf("node %s: no such node in the record", node)
		}
		err := pageTmpl.ExecuteTemplate(&b, "node", d)
		return b.Bytes(), d.Index, err
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	var last []byte
	ctx := req.Context()
	for ctx.Err() == nil {
		// Listen before rendering, so a change during the render wakes the next round.
		reports := s.fleet.changed()
		var index uint64
		s.rec.Read(func(_ *fsm.Record, i uint64) { index = i })
		body, at, err := render()
		if err != nil {
			_ = writeEvent(w, "gone", index, []byte(err.Error()))
			_ = rc.Flush()
			return
		}
		if !bytes.Equal(body, last) {
			last = bytes.Clone(body)
			if err := writeEvent(w, "page", at, body); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
		wctx, cancel := context.WithTimeout(ctx, pageRefresh)
		recordMoved := make(chan struct{})
		go func() {
			s.rec.Wait(wctx, index)
			close(recordMoved)
		}()
		select {
		case <-reports:
		case <-recordMoved:
		case <-wctx.Done():
		}
		cancel()
		<-recordMoved
	}
}

// writeEvent writes one server-sent event: each line of data on a data: line of its own. A
// line ends at CR, LF or CRLF, as the browser reads the stream, so a carriage return inside a
// report's text (or a node name in the query) starts a new data: line and never a field of its own.
func writeEvent(w io.Writer, event string, id uint64, data []byte) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "event: %s\nid: %d\n", event, id)
	data = bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n"))
	data = bytes.ReplaceAll(data, []byte("\r"), []byte("\n"))
	for _, line := range bytes.Split(data, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

// pageAgo says how long before now t was, to the second ("never" for the zero time).
func pageAgo(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		d = 0
	}
	return d.String() + " ago"
}

// shortKey shortens a WireGuard key or hash for a table cell.
func shortKey(s string) string {
	if len(s) > 12 {
		return s[:10] + "…"
	}
	return s
}
