package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/gossip"
	"meshd/host"
	"meshd/internal/testenv"
	"meshd/report"
)

// scrape GETs /metrics from the agent's operator handler and returns the exposition text.
func scrape(t *testing.T, a *Agent) string {
	t.Helper()
	rec := httptest.NewRecorder()
	a.withMetrics(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// metricValue returns the value of the sample whose line starts with name{labels}.
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no sample %s in the scrape:\n%s", series, grepLines(text, "meshd_"))
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A server's /metrics shows its reconcile passes per kind, a held file and one changed by
// something else, that it leads Raft and how long its commits took; every name passes promlint.
func TestMetricsServer(t *testing.T) {
	root := t.TempDir()
	var h *host.Host
	ts := startTestServer(t, func(a *Agent) {
		a.mx = newMetrics(a, &a.views)
		h = openTestHost(t, host.Config{Root: root, Observe: a.mx.observePass})
		a.host = h
	})
	a := ts.a
	for _, p := range []string{"etc/app/a.conf", "etc/app/b.conf"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte("found\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d := &fsm.Declaration{Node: "hub", Mode: fsm.Adopted}
	for _, p := range []string{"/etc/app/a.conf", "/etc/app/b.conf"} {
		d.Resources = append(d.Resources, fsm.Resource{Module: "app", Kind: fsm.KindFile,
			File: &catalogue.File{Path: p, Content: "declared\n", Mode: "0644"}})
	}
	h.Reconcile(context.Background(), d)
	if err := os.WriteFile(filepath.Join(root, "etc/app/b.conf"), []byte("rewritten by the predecessor\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.Reconcile(context.Background(), d)
	if _, err := propose(ts.s.rec, fsm.OpTokenCreate, fsm.TokenCreate{Hash: "h", Mode: fsm.Adopted, Expires: time.Now().Add(time.Hour).UTC()}); err != nil {
		t.Fatal(err)
	}

	text := scrape(t, a)
	for series, want := range map[string]float64{
		`meshd_reconcile_passes_total{kind="file"}`:            2,
		`meshd_reconcile_errors_total{kind="file"}`:            0,
		`meshd_held_resources{kind="file",node="hub"}`:         2,
		`meshd_held_changed_resources{kind="file",node="hub"}`: 1,
		`meshd_raft_leader`:                                    1,
		`meshd_raft_last_contact_seconds`:                      0,
		`meshd_raft_commit_duration_seconds_count`:             2, // the genesis and the token
		`meshd_gossip_members{state="alive"}`:                  0,
		`meshd_reconcile_duration_seconds_count{kind="file"}`:  2,
	} {
		if got := metricValue(t, text, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if v := metricValue(t, text, `meshd_raft_commit_index`); v < 2 {
		t.Errorf("meshd_raft_commit_index = %v, want at least 2 (genesis and the token)", v)
	}
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// A metrics address is loopback or in the private network; the underlay only when asked.
func TestMetricsAddrRefusesUnderlay(t *testing.T) {
	for _, c := range []struct {
		addr, rng string
		underlay  bool
		want      string // "" for allowed, else a part of the error
	}{
		{"127.0.0.1:9470", "", false, ""},
		{"[::1]:9470", "", false, ""},
		{"10.99.0.1:9470", "10.99.0.0/24", false, ""},
		{"198.51.100.1:9470", "10.99.0.0/24", false, "neither loopback nor in the private network 10.99.0.0/24"},
		{"198.51.100.1:9470", "10.99.0.0/24", true, ""},
		{"10.99.0.1:9470", "", false, "does not know the private network's range yet"},
		{"hub:9470", "10.99.0.0/24", false, "not an IP address"},
		{"127.0.0.1", "", false, "want HOST:PORT"},
	} {
		err := checkMetricsAddr(c.addr, c.rng, c.underlay)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s in %q: refused: %v", c.addr, c.rng, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s in %q: got %v, want an error saying %q", c.addr, c.rng, err, c.want)
		}
	}
}

// The metrics listener serves /metrics and nothing of the operator's API.
func TestMetricsListenerServesOnlyMetrics(t *testing.T) {
	ts := startTestServer(t, func(a *Agent) { a.mx = newMetrics(a, &a.views) })
	a := ts.a
	addr := "127.0.0.1:" + strconv.Itoa(int(freeLoopbackPort(t)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.serveMetrics(ctx, addr)
	client := &http.Client{Timeout: 5 * time.Second}
	var body string
	if err := testenv.Poll(t, 10*time.Second, func() error {
		resp, err := client.Get("http://" + addr + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err
	}); err != nil {
		t.Fatalf("metrics at %s never answered: %v", addr, err)
	}
	if !strings.Contains(body, "meshd_raft_leader 1") {
		t.Errorf("metrics at %s lack meshd_raft_leader 1:\n%s", addr, grepLines(body, "meshd_"))
	}
	resp, err := client.Get("http://" + addr + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("GET /v1/status on the metrics listener: %d, want 404", resp.StatusCode)
	}
}

// reportViews is a role that shows the given reports and knows nothing else.
type reportViews map[string]*report.Report

func (v reportViews) metricReports() map[string]*report.Report { return v }
func (reportViews) collectRole(chan<- prometheus.Metric)       {}
func (reportViews) statusPage() http.Handler                   { return nil }

// Each node's tunnel state is one-hot over the report's three words, and a retired found firewall
// read active again is 1: what MeshdTunnelDark and MeshdFoundFirewallActiveAgain fire on.
func TestMetricsTunnelStateAndFirewallAgain(t *testing.T) {
	now := time.Now()
	rep := func(tunnel string, fw report.FirewallView) *report.Report {
		return &report.Report{When: now, Kinds: map[string]any{
			fsm.KindTunnel:  report.TunnelDetail{State: tunnel, Interface: "wg0"},
			fsm.KindOpening: report.OpeningDetail{Firewall: fw},
		}}
	}
	retired := report.FirewallView{Kind: "ufw", Retired: true}
	again := report.FirewallView{Kind: "ufw", Retired: true, ActiveAgain: true}
	var views roleViews = reportViews{
		"hub":  rep(report.TunnelDark, again),
		"web1": rep(report.TunnelMeshUp, retired),
		"web2": rep(report.TunnelFoundUp, report.FirewallView{Kind: "ufw"}),
	}
	m := newMetrics(noGossip{}, &views)
	rec := httptest.NewRecorder()
	m.handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	text := rec.Body.String()
	want := map[string]float64{
		`meshd_found_firewall_active_again{node="hub"}`:  1,
		`meshd_found_firewall_active_again{node="web1"}`: 0,
		`meshd_found_firewall_active_again{node="web2"}`: 0,
	}
	for node, in := range map[string]string{"hub": report.TunnelDark, "web1": report.TunnelMeshUp, "web2": report.TunnelFoundUp} {
		for _, state := range []string{report.TunnelFoundUp, report.TunnelMeshUp, report.TunnelDark} {
			v := 0.0
			if state == in {
				v = 1
			}
			want[`meshd_tunnel_state{node="`+node+`",state="`+state+`"}`] = v
		}
	}
	for series, v := range want {
		if got := metricValue(t, text, series); got != v {
			t.Errorf("%s = %v, want %v", series, got, v)
		}
	}
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// oneMember is a node whose gossip member is g.
type oneMember struct {
	noGossip
	g *gossip.Gossip
}

func (o oneMember) member() *gossip.Gossip { return o.g }

// A datagram of junk on the gossip port shows in meshd_gossip_rejected_total under its kind; the
// other kinds are there at 0 from the first scrape, so a rate over them starts from nothing.
func TestMetricsGossipRejected(t *testing.T) {
	key := make([]byte, gossip.KeySize)
	_, id, _ := ed25519.GenerateKey(rand.Reader)
	_, _ = rand.Read(key)
	g, err := gossip.Start(gossip.Config{Name: "hub", BindAddr: "127.0.0.1", Keyring: [][]byte{key}, Identity: id,
		Verify: func(string) (ed25519.PublicKey, bool) { return nil, false }})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Shutdown()
	var views roleViews = reportViews{}
	m := newMetrics(oneMember{g: g}, &views)
	scrapeM := func() string {
		rec := httptest.NewRecorder()
		m.handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	c, err := net.Dial("udp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// not a label's tag (244): the datagram is refused as one no key decrypts
	if _, err := c.Write([]byte{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	var text string
	if err := testenv.Poll(t, 10*time.Second, func() error {
		text = scrapeM()
		if v := metricValue(t, text, `meshd_gossip_rejected_total{kind="packet_decrypt"}`); v != 1 {
			return fmt.Errorf("packet_decrypt = %v, want 1", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, kind := range gossip.RefusedKinds() {
		if kind != "packet_decrypt" {
			if v := metricValue(t, text, `meshd_gossip_rejected_total{kind="`+kind+`"}`); v != 0 {
				t.Errorf("meshd_gossip_rejected_total{kind=%q} = %v, want 0", kind, v)
			}
		}
	}
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}
