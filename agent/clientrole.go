package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/gossip"
	"meshd/pki"
	"meshd/report"
	"meshd/setup"
)

// clientRole is a client node's role. A client runs no Raft: it watches its own declaration on the
// servers' bus over mTLS, feeds it to its host reconciler, posts its host report back while its
// gossip reaches no server, and answers the operator's read commands by asking a server. Its
// gossip view and the keys it verifies reports with are a server's answer.
type clientRole struct {
	core
	// bus is the client's own bus, for the calls servers and nodes make of it (peerbus.go).
	bus clientBus
	// busClient calls the servers' bus with the node's certificate; servers are their bus
	// addresses, the one that last answered first.
	busClient *http.Client
	serversMu sync.Mutex
	servers   []string

	// answered is the server that answered last, at answeredAt (under serversMu).
	answered   string
	answeredAt time.Time

	// view is the latest gossip view a server gave.
	viewMu sync.Mutex
	view   api.GossipView
	// viewServers are the view's servers, by name: the members gossip sends the reports to.
	viewServers map[string]bool
	// decl is the node's declaration the watch last passed on, at record index declIndex.
	declMu    sync.Mutex
	decl      *fsm.Declaration
	declIndex uint64
}

// newClientRole checks that the node knows a server to ask.
func newClientRole(c core) (*clientRole, error) {
	if len(c.node.Servers) == 0 {
		return nil, fmt.Errorf("client node %s knows no server (%s has no servers): join it again", c.node.Name, filepath.Join(c.cfg.DataDir, setup.NodeFileName))
	}
	return &clientRole{core: c, servers: c.node.Servers,
		busClient: &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientTLS(&c.identity, c.caCert),
			ResponseHeaderTimeout: 90 * time.Second, IdleConnTimeout: time.Minute}}}, nil
}

// open has nothing to start: a client holds no record.
func (c *clientRole) open() error { return nil }

func (c *clientRole) close() {}

func (c *clientRole) logStarted() {
	c.log.Info("agent started as a client", "id", c.node.ID, "data_dir", c.cfg.DataDir, "socket", c.cfg.Socket, "servers", c.node.Servers)
}

// runLoops watches the declaration on the bus and posts the host's reports there when gossip
// cannot carry them.
func (c *clientRole) runLoops(ctx context.Context) {
	c.logStarted()
	go c.watchBus(ctx)
	go c.postReports(ctx)
}

func (c *clientRole) gossipView() api.GossipView {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	return c.view
}

// refreshView is GET /v1/gossip from a server, sending the index of the view the node holds:
// while it is current the answer is "unchanged", a few bytes; once it moved, the change since
// (delta=1), or the whole view from a server that keeps no delta from it. A server from before
// indexes sends the whole view without one, and the next call sends none.
func (c *clientRole) refreshView(ctx context.Context) error {
	c.viewMu.Lock()
	held, had := c.view.Index, c.view
	c.viewMu.Unlock()
	path := "/v1/gossip"
	if held != 0 {
		path += "?index=" + strconv.FormatUint(held, 10) + "&delta=1"
	}
	var v api.GossipView
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := c.busJSON(rctx, http.MethodGet, path, nil, &v); err != nil {
		return err
	}
	if v.Unchanged {
		if v.Index == held {
			return nil
		}
		c.viewMu.Lock()
		c.view.Index = 0 // the next call asks for the whole view
		c.viewMu.Unlock()
		return fmt.Errorf("a server answered gossip view %d unchanged, but node %s holds view %d", v.Index, c.node.Name, held)
	}
	if v.Delta {
		whole, ok := had.ApplyDelta(v)
		if !ok {
			c.viewMu.Lock()
			c.view.Index = 0 // the next call asks for the whole view
			c.viewMu.Unlock()
			return fmt.Errorf("a server answered a gossip view delta from view %d, but node %s holds view %d", v.Since, c.node.Name, held)
		}
		v = whole
	}
	names := map[string]bool{}
	for _, p := range v.Nodes {
		if p.Server {
			names[p.Name] = true
		}
	}
	c.viewMu.Lock()
	c.view, c.viewServers = v, names
	c.viewMu.Unlock()
	c.followServers(v)
	return nil
}

// followServers keeps the servers' bus addresses as the record has them (a server's mesh.bus may
// move), in memory and in the node file the next start reads.
func (c *clientRole) followServers(v api.GossipView) {
	var addrs []string
	for _, p := range v.Nodes {
		if p.Server && p.Advertise != "" && p.Bus != 0 {
			addrs = append(addrs, net.JoinHostPort(p.Advertise, strconv.Itoa(int(p.Bus))))
		}
	}
	c.serversMu.Lock()
	defer c.serversMu.Unlock()
	if len(addrs) == 0 || sameSet(addrs, c.servers) {
		return
	}
	c.log.Info("the servers' bus addresses changed in the record", "from", c.servers, "to", addrs)
	c.servers = addrs
	nf := *c.node
	nf.Servers = append([]string{}, addrs...)
	if err := setup.WriteNodeFile(c.cfg.DataDir, &nf); err != nil {
		c.log.Warn("node file not updated with the servers' bus addresses", "err", err)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		seen[x]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}

func (c *clientRole) enrolledKey(node string) string {
	p, _ := c.gossipView().Peer(node)
	return p.PublicKey
}

func (c *clientRole) revokedKey(pub string) bool {
	for _, k := range c.gossipView().Revoked {
		if k == pub {
			return true
		}
	}
	return false
}

// isServer says whether node is a server in the last gossip view.
func (c *clientRole) isServer(node string) bool {
	c.viewMu.Lock()
	defer c.viewMu.Unlock()
	return c.viewServers[node]
}

// joinsGossip is true for servers only: a client joins the servers.
func (c *clientRole) joinsGossip(p api.GossipPeer) bool { return p.Server }

// servePeerBus serves the client's own bus (keyring and reach checks) on port, once.
func (c *clientRole) servePeerBus(ctx context.Context, port uint16) { c.startClientBus(ctx, port) }

func (c *clientRole) waitGossipRound(ctx context.Context, d time.Duration) { sleepCtx(ctx, d) }

// busErr is an answer the bus gave: a refusal is final, anything else is worth the next server.
type busErr struct {
	code int
	msg  string
}

func (e *busErr) Error() string { return e.msg }

// busDo sends one request to the servers' bus, trying each known server in turn from the one that
// last answered, and returns the first answer that is not a server's failure.
func (c *clientRole) busDo(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var last error
	c.serversMu.Lock()
	servers := append([]string{}, c.servers...)
	c.serversMu.Unlock()
	for _, addr := range servers {
		resp, err := c.busAt(addr).Send(ctx, method, path, in)
		if err == nil && resp.StatusCode < 500 {
			c.serversMu.Lock()
			c.answered, c.answeredAt = addr, time.Now()
			c.serversMu.Unlock()
			return resp, nil
		}
		if err == nil {
			ae := api.NewAnswerError(resp, resp.Body)
			resp.Body.Close()
			err = fmt.Errorf("server %s answered %s: %s", addr, ae.Status, ae.Body)
		} else {
			err = fmt.Errorf("server %s: %w", addr, err)
		}
		last = err
		if ctx.Err() != nil {
			break
		}
		// Rotate: the next call starts with the next server.
		c.serversMu.Lock()
		if len(c.servers) > 1 && c.servers[0] == addr {
			c.servers = append(c.servers[1:len(c.servers):len(c.servers)], addr)
		}
		c.serversMu.Unlock()
	}
	if last == nil {
		last = errors.New("no server known")
	}
	return nil, last
}

// busAt is the bus of the server at addr, called with this node's certificate.
func (c *clientRole) busAt(addr string) api.Endpoint {
	return api.Endpoint{Client: c.busClient, Base: "https://" + addr}
}

// busJSON is busDo with a JSON answer decoded into out; a 4xx comes back as a busErr.
func (c *clientRole) busJSON(ctx context.Context, method, path string, in, out any) error {
	resp, err := c.busDo(ctx, method, path, in)
	if err != nil {
		return err
	}
	err = api.Endpoint{}.Read(resp, out) // whichever server answered, its answer reads the same
	var ae *api.AnswerError
	if errors.As(err, &ae) {
		return &busErr{code: ae.Code, msg: ae.Text("the bus")}
	}
	return err
}

// watchBus is the client's declaration watch: a blocking query by index, reconnecting with backoff
// to each server it knows, passing each changed declaration to the host.
func (c *clientRole) watchBus(ctx context.Context) {
	var (
		index   uint64
		last    []byte
		lastErr string
	)
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		var v api.DeclarationView
		path := fmt.Sprintf("/v1/declaration/%s?index=%d&wait=30s", url.PathEscape(c.node.Name), index)
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err := c.busJSON(rctx, http.MethodGet, path, nil, &v)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if err.Error() != lastErr {
				c.log.Warn("declaration watch: no server answered; retrying", "servers", c.servers, "err", err, "backoff", backoff)
				lastErr = err.Error()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		if lastErr != "" {
			c.log.Info("declaration watch: reconnected")
			lastErr = ""
		}
		backoff = 250 * time.Millisecond
		index = v.Index
		if v.Declaration == nil {
			continue
		}
		b, _ := json.Marshal(v.Declaration)
		if bytes.Equal(b, last) {
			continue
		}
		last = b
		d := v.Declaration
		c.log.Info("declaration", "index", index, "mode", d.Mode, "assigned", d.Assigned, "taken", d.Taken, "resources", len(d.Resources))
		c.privateRange.Store(d.Tunnel.Range)
		c.declMu.Lock()
		c.decl, c.declIndex = d, index
		c.declMu.Unlock()
		select {
		case c.declarations <- d:
		case <-ctx.Done():
			return
		}
	}
}

// postReports sends the host's report to a server over the bus after each pass, and again now and
// then so a server that restarted (reports live in its memory) has it back, while the node's
// gossip sees no server alive: gossip is how reports travel, the bus is the fallback. A failed
// post is retried with backoff (reportpost.go).
func (c *clientRole) postReports(ctx context.Context) {
	p := newReportPoster(c.log, c.host.Report, c.serverAlive, func(ctx context.Context, rep report.Report) error {
		return c.busJSON(ctx, http.MethodPost, "/v1/report", rep, nil)
	})
	p.wake = c.host.Passed()
	p.run(ctx)
}

// serverAlive says whether this (client) node's gossip sees a server alive: while it does, its
// reports reach the servers by gossip and the bus is not needed for them.
func (c *clientRole) serverAlive() bool {
	g := c.gossip.member()
	if g == nil {
		return false
	}
	view := c.gossipView()
	for _, m := range g.Members() {
		if p, ok := view.Peer(m.Name); ok && p.Server && m.State == gossip.StateAlive && m.Name != c.node.Name {
			return true
		}
	}
	return false
}

// operatorAPI is a client node's operator socket: what is about this machine (its originals, its
// gossip, its reach, its leave, its own status) is answered here. The record is not this node's
// to read or write: its certificate reads its own declaration and posts its own report, nothing
// more, so every other request is refused, naming where to run it (a server, or an operator
// credential).
func (c *clientRole) operatorAPI() http.Handler {
	mux := http.NewServeMux()
	c.local.localRoutes(mux)
	mux.HandleFunc("GET /v1/status", c.getStatus)
	mux.HandleFunc("/", c.notHere)
	return mux
}

// notHere refuses a request about the record on a client's socket, naming the servers.
func (c *clientRole) notHere(w http.ResponseWriter, _ *http.Request) {
	api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: ClientRefusal(c.node.Name, c.serverNames())})
}

// serverNames are the servers by name as the gossip view has them, else by bus address.
func (c *clientRole) serverNames() []string {
	var servers []string
	for _, p := range c.gossipView().Nodes {
		if p.Server {
			servers = append(servers, p.Name)
		}
	}
	if len(servers) == 0 {
		c.serversMu.Lock()
		servers = append(servers, c.servers...)
		c.serversMu.Unlock()
	}
	return servers
}
