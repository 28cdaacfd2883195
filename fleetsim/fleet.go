package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"meshd/api"
	"meshd/catalogue"
	"meshd/fsm"
	"meshd/pki"
)

// Options are a fleet's: where its nodes live and what they are.
type Options struct {
	// Hosts holds the simulated nodes' addresses, each its own (NodeAddr), which it binds and
	// advertises; FirstPort is the first node's gossip port, each next node the next port.
	Hosts     netip.Prefix
	FirstPort int
	Shape     Shape
	// Credential is the operator's: it makes the join tokens, adds and assigns the modules and
	// reads the status, over the servers' bus.
	Credential *pki.Credential
	// Publish is how often a node at rest publishes its report again (an agent's 10 s).
	Publish time.Duration
	// Parallel is how many enrolments run at once.
	Parallel int
	// Profile is the simulated nodes' own memberlist timers: lan (an agent's, the default) or
	// wan (probes every 5 s), for a thousand members in one process on a small machine, whose
	// probes of each other would otherwise take it over. The servers keep the agent's.
	Profile string
	// WholeView makes the nodes read the gossip view as agents before deltas did: whole again
	// each time it changed (for a measure beside today's).
	WholeView bool
	Log       *slog.Logger
}

// Fleet is the simulated client nodes of one process.
type Fleet struct {
	o Options
	// op is the operator's client to the servers' bus; ops one for each of Parallel workers (a
	// client keeps what its last answer said, so it serves one request at a time).
	op     *api.Client
	ops    []*api.Client
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	clients []*client
}

// New makes an empty fleet; Enrol adds its nodes.
func New(o Options) (*Fleet, error) {
	if o.Credential == nil || len(o.Credential.Bus) == 0 {
		return nil, errors.New("a fleet needs an operator credential that names the servers' bus")
	}
	if !o.Hosts.IsValid() || o.FirstPort == 0 {
		return nil, errors.New("a fleet needs the addresses and first port its nodes bind")
	}
	if o.Publish == 0 {
		o.Publish = 10 * time.Second
	}
	if o.Parallel < 1 {
		o.Parallel = 8
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Fleet{o: o, ctx: ctx, cancel: cancel}
	f.op = f.operator()
	for range o.Parallel {
		f.ops = append(f.ops, f.operator())
	}
	return f, nil
}

// operator is a client of the operator's API on the servers' bus, with the credential.
func (f *Fleet) operator() *api.Client {
	return api.NewBusClient("fleetsim", f.o.Credential.Bus, f.o.Credential.TLS())
}

// Close stops every node (its gossip without a leave: the servers see it fail).
func (f *Fleet) Close() {
	f.cancel()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.clients {
		c.stop()
	}
}

// Size is how many nodes run.
func (f *Fleet) Size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.clients)
}

func (f *Fleet) nodes() []*client {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.clients)
}

// EnrolResult is how an enrolment of n nodes went.
type EnrolResult struct {
	Nodes int `json:"nodes"`
	// Tokens is how long making the n join tokens took (one Raft command each).
	Tokens time.Duration `json:"tokens_ns"`
	// Enrol is how long the n enrolments took, Parallel at once; JoinsPerSecond n over it.
	Enrol          time.Duration `json:"enrol_ns"`
	JoinsPerSecond float64       `json:"joins_per_s"`
	// Up is how long until each enrolled node had the gossip view, its member and its first
	// report sent.
	Up time.Duration `json:"up_ns"`
	// UpView, UpGossip and UpPublish are a node's mean time in each step of coming up: reading
	// the gossip view, starting its member and joining the servers', and its first report.
	UpView    time.Duration `json:"up_view_ns"`
	UpGossip  time.Duration `json:"up_gossip_ns"`
	UpPublish time.Duration `json:"up_publish_ns"`
}

// Enrol adds n nodes: a join token each from the operator, then the enrolments, then each node's
// gossip and first report.
func (f *Fleet) Enrol(ctx context.Context, n int) (EnrolResult, error) {
	res := EnrolResult{Nodes: n}
	first := f.Size()
	tokens := make([]string, n)
	start := time.Now()
	if err := f.each(ctx, n, func(ctx context.Context, w, i int) error {
		var tv api.TokenView
		// A token the servers failed to make is asked again (an extra token is harmless).
		var err error
		for try := range enrolTries {
			if try > 0 {
				time.Sleep(time.Duration(try) * time.Second)
			}
			if err = f.ops[w].Post(ctx, "/v1/tokens", api.TokenRequest{Mode: fsm.Adopted, TTL: "1h"}, &tv); err == nil {
				tokens[i] = tv.Token
				return nil
			}
		}
		return fmt.Errorf("join token %d of %d: %w", i+1, n, err)
	}); err != nil {
		return res, err
	}
	res.Tokens = time.Since(start)
	made := make([]*client, n)
	start = time.Now()
	if err := f.each(ctx, n, func(ctx context.Context, w, i int) error {
		c, err := enrol(ctx, NodeName(first+i), tokens[i], NodeAddr(f.o.Hosts, first+i).String(), f.o.FirstPort+first+i, f.o.Shape, f.o.Profile, f.o.Log)
		if c != nil {
			c.whole = f.o.WholeView
		}
		made[i] = c
		return err
	}); err != nil {
		return res, err
	}
	res.Enrol = time.Since(start)
	res.JoinsPerSecond = float64(n) / res.Enrol.Seconds()
	start = time.Now()
	var stepMu sync.Mutex
	step := func(d *time.Duration, since time.Time) {
		stepMu.Lock()
		*d += time.Since(since) / time.Duration(n)
		stepMu.Unlock()
	}
	err := f.each(ctx, n, func(ctx context.Context, w, i int) error {
		c := made[i]
		at := time.Now()
		// A server too busy to answer is asked again, as an agent does every few seconds.
		var err error
		for try := range enrolTries {
			if try > 0 {
				time.Sleep(time.Duration(try) * time.Second)
			}
			if err = c.refreshView(ctx); err == nil {
				break
			}
		}
		if err != nil {
			return err
		}
		step(&res.UpView, at)
		at = time.Now()
		if err := c.startGossip(); err != nil {
			return err
		}
		step(&res.UpGossip, at)
		at = time.Now()
		if err := c.publish(); err != nil {
			return err
		}
		step(&res.UpPublish, at)
		f.mu.Lock()
		f.clients = append(f.clients, c)
		f.mu.Unlock()
		go c.run(f.ctx, f.o.Publish)
		return nil
	})
	res.Up = time.Since(start)
	return res, err
}

// NodeName is the simulated node i's name.
func NodeName(i int) string { return fmt.Sprintf("sim%04d", i) }

// each runs do for 0..n-1, Parallel at once, and returns the first error.
func (f *Fleet) each(ctx context.Context, n int, do func(ctx context.Context, worker, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for w := range min(f.o.Parallel, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := do(ctx, w, i); err != nil {
					errs <- err
					cancel()
				}
			}
		}()
	}
	for i := range n {
		select {
		case work <- i:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}

// AddModule adds a module declaring one file, /etc/NAME/NAME.conf, to the catalogue.
func (f *Fleet) AddModule(ctx context.Context, name string) error {
	src := fmt.Sprintf("name: %s\ndescription: a file every simulated node writes\nfiles:\n  - path: /etc/%s/%s.conf\n    content: |\n      fleet = %s\n    mode: \"0644\"\n", name, name, name, name)
	var out any
	return f.op.Post(ctx, "/v1/modules", api.ModuleAddRequest{Source: catalogue.Source{File: name + ".yaml", Data: src}}, &out)
}

// AssignResult is how assigning a module to every node went.
type AssignResult struct {
	Nodes int `json:"nodes"`
	// Assigned is how long the assignments took (one command each, Parallel at once); InForce
	// how long from the first until the leader's board had every node's report of a pass with
	// the module assigned.
	Assigned time.Duration `json:"assigned_ns"`
	InForce  time.Duration `json:"in_force_ns"`
	// Status is the slowest `status` read while waiting.
	Status time.Duration `json:"status_ns"`
}

// AssignAll assigns module to every node, one command each, and waits until the leader's board
// says every node's report is of a pass that had it (the step "prepared MODULE").
func (f *Fleet) AssignAll(ctx context.Context, module string, wait time.Duration) (AssignResult, error) {
	nodes := f.nodes()
	res := AssignResult{Nodes: len(nodes)}
	start := time.Now()
	if err := f.each(ctx, len(nodes), func(ctx context.Context, w, i int) error {
		var n fsm.Node
		path := fmt.Sprintf("/v1/nodes/%s/modules/%s/assign", url.PathEscape(nodes[i].name), url.PathEscape(module))
		// An assignment the servers failed is sent again; one a lost answer had committed says so.
		var err error
		for try := range enrolTries {
			if try > 0 {
				time.Sleep(time.Duration(try) * time.Second)
			}
			if err = f.ops[w].Post(ctx, path, nil, &n); err == nil || (try > 0 && strings.Contains(err.Error(), "already assigned")) {
				return nil
			}
		}
		return err
	}); err != nil {
		return res, fmt.Errorf("assign %s: %w", module, err)
	}
	res.Assigned = time.Since(start)
	names := make([]string, len(nodes))
	for i, c := range nodes {
		names[i] = c.name
	}
	deadline := start.Add(wait)
	for {
		missing, took, err := f.notPrepared(ctx, module, names)
		res.Status = max(res.Status, took)
		if err == nil && len(missing) == 0 {
			res.InForce = time.Since(start)
			return res, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("%d nodes' reports do not have %s assigned, e.g. %v", len(missing), module, missing[:min(5, len(missing))])
			}
			return res, fmt.Errorf("assign %s to %d nodes: not in force within %s: %w", module, len(nodes), wait, err)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// notPrepared are the nodes whose board row, on the leader, does not have "prepared module" done;
// took is how long the status read took.
func (f *Fleet) notPrepared(ctx context.Context, module string, names []string) ([]string, time.Duration, error) {
	var st api.StatusView
	start := time.Now()
	if err := f.op.Get(ctx, "/v1/status", &st); err != nil {
		return nil, time.Since(start), err
	}
	took := time.Since(start)
	if st.Board == nil {
		return names, took, errors.New("the status has no board")
	}
	done := map[string]bool{}
	for _, row := range st.Board.Rows {
		for _, s := range row.Steps {
			if s.Name == "prepared "+module && s.Done {
				done[row.Node] = true
			}
		}
	}
	var missing []string
	for _, n := range names {
		if !done[n] {
			missing = append(missing, n)
		}
	}
	return missing, took, nil
}
