package fleetsim

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"meshd/api"
	"meshd/fsm"
	"meshd/gossip"
	"meshd/pki"
	"meshd/setup"
)

// client is one simulated client node: its own identity key, enrolled through a join token,
// the certificate the servers issued it, a gossip member of its own (memberlist, on its own
// port) and its declaration watch on the servers' bus. Only its machine is simulated: its host
// report is its shape's, with the declaration's files written.
type client struct {
	name    string
	shape   Shape
	profile string // memberlist's timers (Options.Profile)
	whole   bool   // asks for the whole gossip view, never a delta (Options.WholeView)
	log     *slog.Logger

	key   ed25519.PrivateKey
	id    tls.Certificate
	ca    *x509.Certificate
	ring  [][]byte
	bus   *http.Client
	gport int
	addr  string

	mu       sync.Mutex
	servers  []string // the servers' bus addresses, the one that answered last first
	view     api.GossipView
	keys     map[string]ed25519.PublicKey
	isServer map[string]bool
	decl     *fsm.Declaration
	declJSON []byte
	index    uint64
	// watchAt is the server the watch's request in flight went to and when it was written.
	watchAt   string
	watchSent time.Time
	published int

	g  *gossip.Gossip
	tr *counted
}

// enrol makes the node's keys and enrols it with token at the token's servers, as `meshd join`
// does (the same signed request), without the machine's preflight: the simulated machine has
// no ports of its own to check.
func enrol(ctx context.Context, name, token, addr string, gport int, shape Shape, profile string, log *slog.Logger) (*client, error) {
	p, _, err := pki.ParseToken(token)
	if err != nil {
		return nil, fmt.Errorf("node %s: token: %w", name, err)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	wk, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return nil, err
	}
	idb := make([]byte, 16)
	_, _ = rand.Read(idb)
	req := api.EnrolRequest{Token: token, Node: name, ID: hex.EncodeToString(idb), Advertise: addr,
		WireGuardKey: wk.PublicKey().String(),
		Settings:     map[string]string{"mesh.gossip": strconv.Itoa(gport), "mesh.bus": strconv.Itoa(gport + busOffset)}}
	setup.SignEnrolment(&req, key, time.Now())
	body, _ := json.Marshal(req)
	// A server's failure (no leader for a moment, a commit lost with its leadership) is tried
	// again, as an operator runs the same join again: the same key and ID are enrolled once.
	var resp *api.EnrolResponse
	var last error
	var refused *setup.JoinError
	for try := 0; resp == nil && try < enrolTries && !errors.As(last, &refused); try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(try) * time.Second):
			}
		}
		for _, bus := range p.Bus {
			if resp, last = setup.EnrolOnce(ctx, bus, token, p.CA, body); last == nil || errors.As(last, &refused) {
				break
			}
		}
	}
	if resp == nil {
		return nil, fmt.Errorf("node %s: enrolment: %w", name, last)
	}
	id, err := pki.Identity([]byte(resp.CertPEM), []byte(resp.CACertPEM), key)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	ca, err := pki.ParseCert([]byte(resp.CACertPEM))
	if err != nil {
		return nil, fmt.Errorf("node %s: the CA: %w", name, err)
	}
	c := &client{name: name, shape: shape, profile: profile, log: log.With("node", name), key: key, id: id, ca: ca, ring: resp.Keyring,
		gport: gport, addr: addr, servers: resp.Servers}
	if len(c.servers) == 0 {
		c.servers = p.Bus
	}
	// From the node's own address, as a machine's agent calls.
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}, Timeout: 10 * time.Second}
	c.bus = &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientTLS(&c.id, c.ca), DialContext: dialer.DialContext,
		ResponseHeaderTimeout: 90 * time.Second, IdleConnTimeout: time.Minute}}
	if resp.Declaration.Declaration != nil {
		c.decl, c.index = resp.Declaration.Declaration, resp.Declaration.Index
	}
	return c, nil
}

// busGet is one GET on the servers' bus with the node's certificate, trying each server in turn
// from the one that answered last, as a client agent does. sent, if set, is called with the
// server once the request is written.
func (c *client) busGet(ctx context.Context, path string, out any, sent func(server string)) error {
	c.mu.Lock()
	servers := append([]string{}, c.servers...)
	c.mu.Unlock()
	var last error
	for i, s := range servers {
		rctx := ctx
		if sent != nil {
			rctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(w httptrace.WroteRequestInfo) {
				if w.Err == nil {
					sent(s)
				}
			}})
		}
		ep := api.Endpoint{Client: c.bus, Base: "https://" + s, Limit: 16 << 20}
		resp, err := ep.Send(rctx, http.MethodGet, path, nil)
		if err == nil && resp.StatusCode < 500 {
			if i > 0 {
				c.mu.Lock()
				c.servers = append([]string{s}, without(c.servers, s)...)
				c.mu.Unlock()
			}
			return ep.Read(resp, out)
		}
		if err == nil {
			last = ep.Read(resp, nil)
		} else {
			last = err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return fmt.Errorf("node %s: no server answered %s: %w", c.name, path, last)
}

func without(list []string, s string) []string {
	var out []string
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// refreshView reads the gossip view (every node's key and ports) from a server, as a client agent
// does: the servers' gossip addresses to join, whom to send the report to, the keys to verify by.
// It sends the index of the view it holds: an "unchanged" answer leaves that view, a delta
// (the change since it, asked with delta=1) is applied to it.
func (c *client) refreshView(ctx context.Context) error {
	c.mu.Lock()
	held, had := c.view.Index, c.view
	c.mu.Unlock()
	path := "/v1/gossip"
	if held != 0 {
		path += "?index=" + strconv.FormatUint(held, 10)
		if !c.whole {
			path += "&delta=1"
		}
	}
	var v api.GossipView
	if err := c.busGet(ctx, path, &v, nil); err != nil {
		return err
	}
	if v.Unchanged {
		if v.Index != held {
			c.mu.Lock()
			c.view.Index = 0
			c.mu.Unlock()
			return fmt.Errorf("node %s: a server answered gossip view %d unchanged; it holds %d", c.name, v.Index, held)
		}
		return nil
	}
	if v.Delta {
		whole, ok := had.ApplyDelta(v)
		if !ok {
			c.mu.Lock()
			c.view.Index = 0
			c.mu.Unlock()
			return fmt.Errorf("node %s: a server answered a gossip view delta from %d; it holds %d", c.name, v.Since, held)
		}
		v = whole
	}
	keys, servers := map[string]ed25519.PublicKey{}, map[string]bool{}
	for _, p := range v.Nodes {
		if pub, err := pki.ParsePublicKey(p.PublicKey); err == nil {
			keys[p.Name] = pub
		}
		servers[p.Name] = p.Server
	}
	c.mu.Lock()
	c.view, c.keys, c.isServer = v, keys, servers
	c.mu.Unlock()
	return nil
}

// startGossip starts the node's member on its own port and joins the servers' gossip.
func (c *client) startGossip() error {
	c.mu.Lock()
	var join []string
	for _, p := range c.view.Nodes {
		if p.Server {
			join = append(join, net.JoinHostPort(p.Advertise, strconv.Itoa(int(p.Gossip))))
		}
	}
	c.mu.Unlock()
	tr, err := newCounted(c.addr, c.gport)
	if err != nil {
		return fmt.Errorf("node %s: gossip on %s: %w", c.name, hostPort(c.addr, c.gport), err)
	}
	c.tr = tr
	g, err := gossip.Start(gossip.Config{Name: c.name, BindAddr: c.addr, BindPort: c.gport, Keyring: c.ring, Identity: c.key,
		Transport: tr,
		Verify: func(n string) (ed25519.PublicKey, bool) {
			c.mu.Lock()
			defer c.mu.Unlock()
			k, ok := c.keys[n]
			return k, ok
		},
		Server: func(n string) bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.isServer[n]
		},
		Join: join, Logger: c.log, Tuning: gossip.Tuning{Profile: c.profile}})
	if err != nil {
		_ = tr.Shutdown()
		return fmt.Errorf("node %s: gossip on %s: %w", c.name, hostPort(c.addr, c.gport), err)
	}
	c.g = g
	return nil
}

// publish signs and sends the report of the node's last declaration to the servers.
func (c *client) publish() error {
	c.mu.Lock()
	d := c.decl
	c.mu.Unlock()
	b, err := json.Marshal(c.shape.Report(c.name, d, time.Now()))
	if err != nil {
		return err
	}
	if err := c.g.Publish(b); err != nil {
		return err
	}
	c.mu.Lock()
	c.published++
	c.mu.Unlock()
	return nil
}

// Timers of a client agent the simulator keeps (agent/gossip.go): the gossip view is read again
// every viewEvery, and the servers not seen alive are joined again at most every rejoinEvery.
const (
	viewEvery   = 5 * time.Second
	rejoinEvery = 10 * time.Second
)

// run is the node's life once enrolled, as a client agent lives it: its declaration watch (a
// blocking query by index, each server in turn, backing off while none answers), a report
// published after each new declaration and every interval at rest, and the gossip view read
// again every viewEvery, joining again the servers it does not see alive.
func (c *client) run(ctx context.Context, every time.Duration) {
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := c.publish(); err != nil {
					c.log.Warn("report not published", "err", err)
				}
			}
		}
	}()
	go c.followView(ctx)
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		c.mu.Lock()
		index := c.index
		c.mu.Unlock()
		var v api.DeclarationView
		path := fmt.Sprintf("/v1/declaration/%s?index=%d&wait=30s", url.PathEscape(c.name), index)
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err := c.busGet(rctx, path, &v, func(s string) {
			c.mu.Lock()
			c.watchAt, c.watchSent = s, time.Now()
			c.mu.Unlock()
		})
		cancel()
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = 250 * time.Millisecond
		b, _ := json.Marshal(v.Declaration)
		c.mu.Lock()
		changed := v.Declaration != nil && string(b) != string(c.declJSON)
		c.index = v.Index
		if changed {
			c.decl, c.declJSON = v.Declaration, b
		}
		c.mu.Unlock()
		if changed {
			if err := c.publish(); err != nil {
				c.log.Warn("report not published", "err", err)
			}
		}
	}
}

// followView reads the gossip view again every viewEvery and joins the servers it does not see
// alive, at most every rejoinEvery.
func (c *client) followView(ctx context.Context) {
	var lastJoin time.Time
	t := time.NewTicker(viewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.refreshView(ctx); err != nil || time.Since(lastJoin) < rejoinEvery {
			continue
		}
		alive := map[string]bool{}
		for _, m := range c.g.Members() {
			alive[m.Name] = m.State == gossip.StateAlive
		}
		var targets []string
		c.mu.Lock()
		for _, p := range c.view.Nodes {
			if p.Server && !alive[p.Name] && p.Gossip != 0 {
				targets = append(targets, net.JoinHostPort(p.Advertise, strconv.Itoa(int(p.Gossip))))
			}
		}
		c.mu.Unlock()
		if len(targets) > 0 {
			lastJoin = time.Now()
			_, _ = c.g.Join(targets)
		}
	}
}

// watching is the server the node's declaration watch went to last, and when.
func (c *client) watching() (string, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watchAt, c.watchSent
}

func (c *client) stop() {
	if c.g != nil {
		_ = c.g.Shutdown()
	}
	c.bus.CloseIdleConnections()
}

// busOffset puts each simulated node's bus port (which nothing calls: the simulator serves no
// node bus) this far above its gossip port, so its ports never meet another node's.
const busOffset = 20000

// enrolTries is how many times an enrolment a server failed (not refused) is sent.
const enrolTries = 5
