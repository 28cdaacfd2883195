package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"meshd/agent/autopilot"
	"meshd/agent/raftnode"
	"meshd/agent/record"
	"meshd/api"
	"meshd/catalogue"
	"meshd/fsm"
)

// The API's views: what the operator's commands print.

const applyTimeout = 15 * time.Second

func writeErr(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var ref *fsm.Refusal
	var nl *raftnode.NotLeaderError
	var nf notFound
	switch {
	case errors.As(err, &ref):
		code = http.StatusUnprocessableEntity
	case errors.As(err, &nl):
		code = http.StatusServiceUnavailable
		// Raft refused before proposing: sending it again to the leader applies it once.
		w.Header().Set(api.HeaderNotProposed, "1")
	case errors.As(err, new(*NoQuorumError)):
		code = http.StatusServiceUnavailable
	case errors.As(err, &nf):
		code = http.StatusNotFound
	}
	api.WriteJSON(w, code, api.ErrorBody{Error: err.Error()})
}

type notFound string

func (e notFound) Error() string { return string(e) }

func (s *recordAPI) leader() api.LeaderView {
	l := s.rec.Leader()
	return api.LeaderView{ID: l.ID, Address: l.Addr, Node: l.Node}
}

func (s *recordAPI) getStatus(w http.ResponseWriter, _ *http.Request) {
	st := api.StatusView{Leader: s.leader(), Nodes: []api.NodeSummary{}, Gossip: api.GossipSummary{Node: s.node.Name, Rejected: map[string]uint64{}},
		ServedBy: s.node.Name, Voters: s.rec.VoterNames()}
	st.Warning = autopilot.EvenWarning(len(st.Voters))
	if s.rec.IsLeader() {
		st.Leader.Why = s.why()
	} else {
		st.Stale = staleText(s.raftState())
	}
	var assigned, taken [][]string
	s.rec.Read(func(r *fsm.Record, index uint64) {
		st.Index = index
		st.Privileged = privilegedModules(r)
		for _, name := range r.NodeNames() {
			n := r.Nodes[name]
			st.Nodes = append(st.Nodes, api.NodeSummary{Name: n.Name, Mode: n.Mode, ModeSince: n.ModeSince,
				ControlNode: r.Genesis != nil && r.Genesis.ControlNode == n.Name, Server: n.Server,
				Address: n.Address, Assigned: len(n.Assigned), Taken: len(n.EffectiveTaken())})
			assigned, taken = append(assigned, slices.Clone(n.Assigned)), append(taken, n.EffectiveTaken())
		}
	})
	members := s.fleet.members()
	reports := s.fleet.stampedReports()
	for i := range st.Nodes {
		n := &st.Nodes[i]
		n.Liveness, _ = liveness(members, n.Name)
		rep, from := reports[n.Name].rep, reports[n.Name].from
		n.HeldFiles, n.HeldContainers = heldCounts(rep)
		n.Tunnel = tunnelState(rep)
		n.FirewallActiveAgain = activeAgain(rep)
		if rep != nil {
			n.ReportFrom = from
		}
		n.Modules = moduleStates(rep, assigned[i], taken[i])
	}
	counts := api.CountNodes(st.Nodes)
	st.Counts = &counts
	if tv := s.fleet.tunnel(); tv.Range != "" {
		st.Tunnel = &tv
	}
	b := s.fleet.board()
	st.Board = &b
	if g := s.fleet.gossipMember(); g != nil {
		st.Gossip.Running = true
		for r, c := range g.Rejected() {
			st.Gossip.Rejected[string(r)] = c
		}
	}
	api.WriteJSON(w, http.StatusOK, st)
}

func (s *recordAPI) getNode(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("node")
	var v *api.NodeView
	var err error
	s.rec.Read(func(r *fsm.Record, _ uint64) {
		n := r.Nodes[name]
		if n == nil {
			err = notFound(fmt.Sprintf("node %s: no such node (the record has: %s)", name, strings.Join(r.NodeNames(), ", ")))
			return
		}
		cp := *n
		v = &api.NodeView{Node: &cp, ControlNode: r.Genesis != nil && r.Genesis.ControlNode == n.Name, Taken: n.EffectiveTaken()}
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	if rep := s.fleet.report(name); rep != nil {
		v.Report = rep
	}
	api.WriteJSON(w, http.StatusOK, v)
}

// getOriginal serves the original of a file the node's host held or replaced.
func (a *Agent) getOriginal(w http.ResponseWriter, req *http.Request) {
	if a.getFoundRecord(w, req) {
		return
	}
	name, path := req.PathValue("node"), req.URL.Query().Get("path")
	if path == "" {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "which file? give ?path=/absolute/path"})
		return
	}
	if name != a.node.Name {
		writeErr(w, notFound(fmt.Sprintf("node %s: its originals are kept on that node; run `meshd node original %s %s` there", name, name, path)))
		return
	}
	b, err := a.host.Original(path)
	if err != nil {
		writeErr(w, notFound(fmt.Sprintf("node %s: %v", name, err)))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(b)
}

// privilegeOf is module name's privilege as the record has it: who said it may be root, or that
// no one has yet; nil for a module kept to its own places.
func privilegeOf(r *fsm.Record, name string) *api.ModulePrivilege {
	reaches, g := r.RootEquivalent(name), r.Privileged[name]
	if g == nil && len(reaches) == 0 {
		return nil
	}
	p := &api.ModulePrivilege{Module: name, Reaches: append([]string{}, reaches...)}
	if g != nil {
		p.By, p.At = g.By, g.At
	} else {
		p.Unconfirmed = true
	}
	return p
}

// privilegedModules is privilegeOf every module that has one, the unconfirmed first.
func privilegedModules(r *fsm.Record) []api.ModulePrivilege {
	var out []api.ModulePrivilege
	for _, unconfirmed := range []bool{true, false} {
		for _, name := range r.Catalogue.Names() {
			if p := privilegeOf(r, name); p != nil && p.Unconfirmed == unconfirmed {
				out = append(out, *p)
			}
		}
	}
	return out
}

func moduleView(r *fsm.Record, m *catalogue.Module) api.ModuleView {
	v := api.ModuleView{Module: m, AssignedTo: []string{}, TakenOn: []string{}, Privilege: privilegeOf(r, m.Name)}
	for _, name := range r.NodeNames() {
		n := r.Nodes[name]
		for _, a := range n.Assigned {
			if a == m.Name {
				v.AssignedTo = append(v.AssignedTo, name)
				if n.IsTaken(a) {
					v.TakenOn = append(v.TakenOn, name)
				}
			}
		}
	}
	return v
}

func (s *recordAPI) listModules(w http.ResponseWriter, _ *http.Request) {
	out := []api.ModuleView{}
	s.rec.Read(func(r *fsm.Record, _ uint64) {
		for _, name := range r.Catalogue.Names() {
			out = append(out, moduleView(r, r.Catalogue[name]))
		}
	})
	api.WriteJSON(w, http.StatusOK, out)
}

func (s *recordAPI) getModule(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("module")
	var v *api.ModuleView
	var err error
	s.rec.Read(func(r *fsm.Record, _ uint64) {
		m := r.Catalogue[name]
		if m == nil {
			msg := fmt.Sprintf("module %s: not in the catalogue", name)
			if s := r.Catalogue.Suggest(name); len(s) > 0 {
				msg += fmt.Sprintf("; did you mean %v?", s)
			}
			err = notFound(msg)
			return
		}
		mv := moduleView(r, m)
		v = &mv
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, v)
}

func (s *recordAPI) addModule(w http.ResponseWriter, req *http.Request) {
	var body api.ModuleAddRequest
	if err := json.NewDecoder(io.LimitReader(req.Body, 4<<20)).Decode(&body); err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "bad request: " + err.Error()})
		return
	}
	// Refuse a bad manifest before it reaches the log; Apply checks again.
	if _, err := catalogue.Parse(body.Source.File, []byte(body.Source.Data)); err != nil {
		api.WriteJSON(w, http.StatusUnprocessableEntity, api.ErrorBody{Error: err.Error()})
		return
	}
	v, index, err := s.propose(req, fsm.OpCatalogueAdd, fsm.CatalogueAdd{Source: body.Source, Privileged: body.Privileged})
	committedAt(w, index)
	if err != nil {
		writeErr(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, v)
}

// confirmModule records the operator's word on a module the allowlist found root-equivalent
// after an upgrade (fsm.OpModuleConfirm).
func (s *recordAPI) confirmModule(w http.ResponseWriter, req *http.Request) {
	v, index, err := s.propose(req, fsm.OpModuleConfirm, fsm.ModuleConfirm{Module: req.PathValue("module")})
	committedAt(w, index)
	if err != nil {
		writeErr(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, v)
}

func (s *recordAPI) moduleAction(w http.ResponseWriter, req *http.Request) {
	ops := map[string]fsm.Op{"assign": fsm.OpModuleAssign, "unassign": fsm.OpModuleUnassign, "take": fsm.OpModuleTake}
	op, ok := ops[req.PathValue("action")]
	if !ok {
		api.WriteJSON(w, http.StatusNotFound, api.ErrorBody{Error: "unknown action " + req.PathValue("action")})
		return
	}
	body := fsm.ModuleOnNode{Node: req.PathValue("node"), Module: req.PathValue("module")}
	if op == fsm.OpModuleTake {
		// A take that would lose what a found container has is refused without the operator's
		// word; with it, what was accepted goes into the command and so into the history.
		if losses := s.lossesOfTake(req.Context(), body.Node, body.Module); len(losses) > 0 {
			if req.URL.Query().Get("accept_loss") != "true" {
				api.WriteJSON(w, http.StatusConflict, api.ErrorBody{Error: lossRefusal(body.Node, body.Module, losses)})
				return
			}
			body.AcceptLoss = losses
		}
	}
	v, index, err := s.propose(req, op, body)
	committedAt(w, index)
	if err != nil {
		writeErr(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, v)
}

// getDeclaration serves a node's declaration. With ?index=N it blocks until the node's declaration
// may differ from the one the caller holds at N (or ?wait= passes, default 5 minutes), so a node
// learns of a change at once and is not woken by writes that leave it alone (history, reports).
func (s *recordAPI) getDeclaration(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("node")
	if q := req.URL.Query().Get("index"); q != "" {
		index, err := strconv.ParseUint(q, 10, 64)
		if err != nil {
			api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "index: " + err.Error()})
			return
		}
		wait := 5 * time.Minute
		if q := req.URL.Query().Get("wait"); q != "" {
			if wait, err = time.ParseDuration(q); err != nil {
				api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "wait: " + err.Error()})
				return
			}
		}
		ctx, cancel := context.WithTimeout(req.Context(), wait)
		s.waitDeclaration(ctx, name, index)
		cancel()
	}
	var v api.DeclarationView
	var err error
	s.rec.Read(func(r *fsm.Record, index uint64) {
		v.Index = index
		v.Declaration, err = fsm.Compose(r, name)
	})
	if err != nil {
		// Compose fails for an unknown node; a module that no longer resolves is the record's fault.
		var ref *fsm.Refusal
		if errors.As(err, &ref) && ref.Module == "" {
			err = notFound(err.Error())
		}
		writeErr(w, err)
		return
	}
	w.Header().Set(api.HeaderIndex, strconv.FormatUint(v.Index, 10))
	api.WriteJSON(w, http.StatusOK, v)
}

// waitDeclaration returns at once when a command touched the node's declaration past index (the
// caller may have missed a change); otherwise it waits until one does (fsm.Touched): a command
// about other nodes wakes it to read one number, and composes nothing.
func (s *recordAPI) waitDeclaration(ctx context.Context, name string, index uint64) {
	s.rec.WaitDeclared(ctx, name, index)
}

func (s *recordAPI) raftPeers(w http.ResponseWriter, _ *http.Request) {
	servers, err := s.rec.Configuration()
	if err != nil {
		writeErr(w, fmt.Errorf("raft configuration: %w", err))
		return
	}
	leader := s.leader()
	out := []api.PeerView{}
	s.rec.Read(func(r *fsm.Record, _ uint64) {
		names := map[string]string{}
		for _, n := range r.Nodes {
			names[n.ID] = n.Name
		}
		for _, s := range servers {
			out = append(out, api.PeerView{Node: names[string(s.ID)], ID: string(s.ID), Address: string(s.Address),
				Suffrage: s.Suffrage.String(), Leader: string(s.ID) == leader.ID})
		}
	})
	api.WriteJSON(w, http.StatusOK, out)
}

// snapshotSave writes the record as committed: a barrier first, so every acknowledged command is in.
func (s *recordAPI) snapshotSave(w http.ResponseWriter, _ *http.Request) {
	var buf bytes.Buffer
	if err := s.rec.Save(&buf); err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
}

// snapshotRestore replaces the record with a saved one, through Raft, so every server gets it.
func (s *recordAPI) snapshotRestore(w http.ResponseWriter, req *http.Request) {
	data, err := io.ReadAll(io.LimitReader(req.Body, 256<<20))
	if err != nil {
		writeErr(w, err)
		return
	}
	if err := s.rec.Restore(data, time.Minute); err != nil {
		if errors.As(err, new(*record.BadSnapshot)) {
			api.WriteJSON(w, http.StatusUnprocessableEntity, api.ErrorBody{Error: err.Error()})
			return
		}
		writeErr(w, fmt.Errorf("restore: %w", err))
		return
	}
	out := api.RestoreView{Restored: true}
	s.rec.Read(func(r *fsm.Record, index uint64) { out.Index, out.Nodes = index, len(r.Nodes) })
	api.WriteJSON(w, http.StatusOK, out)
}
