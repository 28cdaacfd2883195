package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"meshd/api"
	"meshd/catalogue"
	"meshd/container"
	"meshd/fsm"
	"meshd/host"
	"meshd/report"
	"meshd/setup"
)

// Settings outlive genesis (ADR 0100): `meshd node set` changes a node's settings in the record.
// Before the command is proposed, every port the change moves is checked on the node itself by
// genesis's own port checks (setup/preflight.go: a published port, a listener, a bind), so a
// port held there is refused naming its holder and nothing is committed. Every reader follows the record:
// the host re-publishes containers and moves openings and the guard, the agent rebinds the bus
// and gossip, and a server's Raft port is the record's from its next start.

// SettingsRefusal is a settings change the node's check refused: nothing was committed.
type SettingsRefusal struct {
	Node     string
	Findings []api.Finding
}

func (e *SettingsRefusal) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s: settings refused, nothing was changed:", e.Node)
	for _, f := range e.Findings {
		if f.Level == api.LevelError {
			fmt.Fprintf(&b, "\n  %s: %s", f.Check, f.Message)
		}
	}
	return b.String()
}

// postSettings is `meshd node set`: the change is tried against the record, the ports it moves
// are checked on the node, and only then is the command proposed.
func (s *recordAPI) postSettings(w http.ResponseWriter, req *http.Request) {
	node := req.PathValue("node")
	var body api.SettingsRequest
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<20)).Decode(&body); err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "bad request: " + err.Error()})
		return
	}
	if len(body.Values) == 0 {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: fmt.Sprintf("node %s: no setting given; give KEY=VALUE, such as store.port=6380", node)})
		return
	}
	var binds []api.PortBind
	var err error
	s.rec.Read(func(r *fsm.Record, _ uint64) { binds, err = settingsBinds(r, node, body.Values) })
	if err != nil {
		writeErr(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), 30*time.Second)
	findings, err := s.checkOnNode(ctx, node, binds)
	cancel()
	if err != nil {
		writeErr(w, fmt.Errorf("node %s: the ports the change moves could not be checked on the node, nothing was changed: %w", node, err))
		return
	}
	if refusing(findings) {
		api.WriteJSON(w, http.StatusConflict, api.ErrorBody{Error: (&SettingsRefusal{Node: node, Findings: findings}).Error()})
		return
	}
	v, index, err := s.propose(req, fsm.OpSettingsSet, fsm.SetSettings{Node: node, Values: body.Values})
	committedAt(w, index)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := api.SettingsView{Node: v.(*fsm.Node), Checked: []api.PortCheck{}}
	for _, b := range binds {
		out.Checked = append(out.Checked, api.PortCheck{Setting: b.Key, Proto: b.Proto, Address: b.Addr.String(), Port: b.Port, By: b.By})
	}
	s.log.Info("settings changed", "about", node, "values", body.Values, "ports_checked", len(binds))
	api.WriteJSON(w, http.StatusOK, out)
}

func refusing(fs []api.Finding) bool {
	for _, f := range fs {
		if f.Level == api.LevelError {
			return true
		}
	}
	return false
}

// settingsBinds is what a settings change makes the node bind anew: every port of its assigned
// modules (and meshd's own) that is not bound today at the same address for the same setting.
// A port the node already binds for the same setting is not asked about, so moving a setting back
// and forth works. The change is refused here as the record would refuse it.
func settingsBinds(r *fsm.Record, node string, values map[string]string) ([]api.PortBind, error) {
	n := r.Nodes[node]
	if n == nil {
		return nil, notFound(fmt.Sprintf("node %s: no such node (the record has: %s)", node, strings.Join(r.NodeNames(), ", ")))
	}
	trial, err := fsm.TrySettings(r, fsm.SetSettings{Node: node, Values: values})
	if err != nil {
		return nil, err
	}
	cat := assignedCatalogue(r.Catalogue, n.Assigned)
	before, err := setup.BindPlan(cat, n.Settings, n.Advertise)
	if err != nil {
		return nil, fmt.Errorf("node %s: its ports today: %w", node, err)
	}
	after, err := setup.BindPlan(cat, trial.Settings, n.Advertise)
	if err != nil {
		return nil, fmt.Errorf("node %s: its ports with the change: %w", node, err)
	}
	bound := map[api.PortBind]bool{}
	for _, b := range before {
		bound[b] = true
	}
	var out []api.PortBind
	for _, b := range after {
		if bound[b] || (!n.Server && b.Key == catalogue.MeshModule+".raft") {
			continue // bound today for the same setting, or a client's raft port (it runs no Raft)
		}
		out = append(out, b)
	}
	return out, nil
}

// assignedCatalogue is the catalogue's modules assigned to a node, each marked as BindPlan reads
// a foundation module, so genesis's bind plan lists every port the node binds.
func assignedCatalogue(cat catalogue.Catalogue, assigned []string) catalogue.Catalogue {
	out := catalogue.Catalogue{}
	for _, name := range assigned {
		if m := cat[name]; m != nil {
			cp := *m
			cp.Foundation = true
			out[name] = &cp
		}
	}
	return out
}

// checkOnNode runs the port check on the node: here when it is this node, else by asking the
// node's agent over the peer bus.
func (s *recordAPI) checkOnNode(ctx context.Context, node string, binds []api.PortBind) ([]api.Finding, error) {
	if len(binds) == 0 {
		return nil, nil
	}
	if node == s.node.Name {
		return checkBinds(ctx, s.node.Name, s.dockerHost, binds), nil
	}
	var view api.GossipView
	s.rec.Read(func(r *fsm.Record, _ uint64) { view = gossipViewOf(r, s.node.Name) })
	p, ok := view.Peer(node)
	if !ok || p.Advertise == "" || p.Bus == 0 {
		return nil, fmt.Errorf("node %s has no bus address in the record", node)
	}
	var ans api.PortCheckAnswer
	if err := s.ask.peerJSON(ctx, p, http.MethodPost, "/v1/ports/check", api.PortCheckRequest{Binds: binds}, &ans); err != nil {
		return nil, err
	}
	return ans.Findings, nil
}

// postPortCheck is the peer bus's port check: a server asks it before it commits a settings
// change for this node.
func (a *Agent) postPortCheck(w http.ResponseWriter, req *http.Request, _ string) {
	var in api.PortCheckRequest
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<20)).Decode(&in); err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "port check: " + err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), 20*time.Second)
	defer cancel()
	api.WriteJSON(w, http.StatusOK, api.PortCheckAnswer{Node: a.node.Name, Findings: checkBinds(ctx, a.node.Name, a.cfg.DockerHost, in.Binds)})
}

// checkBinds is genesis's port check (setup/preflight.go) for a running node: what it reads of the
// machine (listening sockets, the engine's published ports), then judgeBinds.
func checkBinds(ctx context.Context, node, dockerHost string, binds []api.PortBind) []api.Finding {
	var out []api.Finding
	listeners, err := host.Listeners()
	if err != nil {
		out = append(out, api.Finding{Check: "machine.listeners", Level: api.LevelWarning, Message: fmt.Sprintf("node %s: cannot read its listening sockets: %v", node, err)})
	}
	var published []container.Published
	if eng, err := container.New(dockerHost); err == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		published, err = eng.Published(pctx)
		cancel()
		eng.Close()
		if err != nil {
			out = append(out, api.Finding{Check: "docker.engine", Level: api.LevelWarning, Message: fmt.Sprintf("node %s: the Docker engine at %s is not reachable (%v): published ports are checked by bind only", node, setup.OrDefault(dockerHost), err)})
		}
	}
	return append(out, judgeBinds(node, binds, listeners, published, os.Getpid())...)
}

// judgeBinds refuses each port a container publishes, a process listens on, or that cannot be
// bound, except by what binds it for the same setting today: the module's own container, or meshd
// itself (pid self) for one of its own ports.
func judgeBinds(node string, binds []api.PortBind, listeners []report.Listener, published []container.Published, self int) []api.Finding {
	var out []api.Finding
	add := func(b api.PortBind, holder, format string, args ...any) {
		msg := fmt.Sprintf("node %s: setting %s: port %d/%s ", node, b.Key, b.Port, b.Proto) + fmt.Sprintf(format, args...)
		out = append(out, api.Finding{Check: "port." + b.Key, Level: api.LevelError, Holder: holder, Message: msg})
	}
	binds = append([]api.PortBind{}, binds...)
	sort.SliceStable(binds, func(i, j int) bool { return binds[i].Key < binds[j].Key })
	for _, b := range binds {
		if holder := setup.PublishedHolder(published, b); holder != "" {
			if strings.HasPrefix(holder, b.By+" (") {
				continue // the module's own container publishes it for this very setting
			}
			add(b, holder, "is held by %s; nothing was changed", holder)
			continue
		}
		if l, ok := setup.ListenerHolder(listeners, b); ok {
			if l.PID == self && strings.HasPrefix(b.By, "meshd (") {
				continue // meshd itself binds it (a setting moved back before the old bind was let go)
			}
			holder := "a process"
			if l.Process != "" {
				holder = fmt.Sprintf("%s (pid %d)", l.Process, l.PID)
			}
			add(b, holder, "is in use by %s on %s; nothing was changed", holder, netip.AddrPortFrom(l.Addr, l.Port))
			continue
		}
		if err := setup.TryBind(b); err != nil {
			switch {
			case errors.Is(err, syscall.EADDRINUSE):
				add(b, "", "is in use on %s by something the node does not name; nothing was changed", netip.AddrPortFrom(b.Addr, b.Port))
			case errors.Is(err, syscall.EADDRNOTAVAIL):
				add(b, "", "cannot be bound: %s is not an address of the node; nothing was changed", b.Addr)
			default:
				add(b, "", "cannot be bound on %s (%v); nothing was changed", netip.AddrPortFrom(b.Addr, b.Port), err)
			}
		}
	}
	return out
}

// followRaftPort makes the record authoritative for the Raft port: node.json keeps a copy of the
// node's mesh.raft setting (Raft opens before the record is read back, so the next start binds
// the port the record says), and the leader moves each server's address in Raft's configuration to
// the record's, so the group reaches a server that restarted on its new port.
func (s *serverRole) followRaftPort(ctx context.Context) {
	if err := s.rec.WaitCaughtUp(ctx); err != nil {
		return
	}
	kept := s.node.RaftPort
	var index uint64
	for ctx.Err() == nil {
		want := map[string]string{} // raft server ID -> advertise:raft, as the record says
		var own uint16
		s.rec.Read(func(r *fsm.Record, i uint64) {
			index = i
			for _, n := range r.Nodes {
				if !n.Server || n.Advertise == "" {
					continue
				}
				p, err := fsm.MeshPort(r, n, "raft")
				if err != nil || p == 0 {
					continue
				}
				want[n.ID] = net.JoinHostPort(n.Advertise, strconv.Itoa(int(p)))
				if n.Name == s.node.Name {
					own = p
				}
			}
		})
		if own != 0 && own != kept {
			nf := *s.node
			nf.RaftPort = own
			if err := setup.WriteNodeFile(s.cfg.DataDir, &nf); err != nil {
				s.log.Error("node file not updated with the record's raft port", "port", own, "err", err)
			} else {
				kept = own
				s.log.Warn("the record moved this server's raft port; it binds the new one at the agent's next start",
					"bound", s.node.RaftPort, "record", own)
			}
		}
		if s.rec.IsLeader() {
			s.moveRaftAddresses(want)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s.rec.Wait(wctx, index)
		cancel()
	}
}

// moveRaftAddresses changes the address of every server in Raft's configuration whose address
// differs from the record's; the leader alone may.
func (s *serverRole) moveRaftAddresses(want map[string]string) {
	servers, err := s.rec.Configuration()
	if err != nil {
		return
	}
	for _, srv := range servers {
		addr, ok := want[string(srv.ID)]
		if !ok || string(srv.Address) == addr {
			continue
		}
		var err error
		if srv.Suffrage == raft.Voter {
			err = s.rec.AddVoter(string(srv.ID), addr, 5*time.Second)
		} else {
			err = s.rec.AddNonvoter(string(srv.ID), addr, 5*time.Second)
		}
		if err != nil {
			s.log.Warn("raft address not moved to the record's", "server", srv.ID, "from", srv.Address, "to", addr, "err", err)
			continue
		}
		s.log.Info("raft address moved to the record's", "server", srv.ID, "from", srv.Address, "to", addr)
	}
}
