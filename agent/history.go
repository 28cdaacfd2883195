package agent

// The board and the history as a server serves them (GET /v1/status's board, GET /v1/history),
// and the leader's part of the history: when a node's last report shows a host condition start
// or end (a held file changed by something else, a found firewall enabled again by hand, the
// tunnel's takeover state, a take stepped back), it commits the node's conditions
// (fsm.OpHostEvents). It proposes only when the set differs from what the record last holds, so
// a standing condition is one event, not one per report.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/report"
)

// getHistory serves `meshd history [NODE] [--since D]`: ?node= and ?since= (a duration).
func (s *recordAPI) getHistory(w http.ResponseWriter, req *http.Request) {
	node := req.URL.Query().Get("node")
	var since time.Time
	if q := req.URL.Query().Get("since"); q != "" {
		d, err := time.ParseDuration(q)
		if err != nil {
			api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "since: " + err.Error()})
			return
		}
		since = time.Now().Add(-d)
	}
	v := historyView(s.rec, node, since)
	api.WriteJSON(w, http.StatusOK, v)
}

// reader reads the record at its index (record.Service).
type reader interface {
	Read(fn func(r *fsm.Record, index uint64))
}

// historyView is the record's history about node ("" every node) since since.
func historyView(f reader, node string, since time.Time) api.HistoryView {
	v := api.HistoryView{Events: []fsm.Event{}}
	f.Read(func(r *fsm.Record, index uint64) {
		v.Index = index
		var keep fsm.HistoryKeep
		if r.History != nil {
			keep = r.History.Keep
			for _, e := range r.History.Events {
				if (node == "" || e.Node == node) && !e.At.Before(since) {
					v.Events = append(v.Events, e)
				}
			}
		}
		count, age := keep.Limits()
		v.Count, v.Age = count, age.String()
	})
	return v
}

// hostConditions are the conditions rep shows that the history records.
func hostConditions(rep *report.Report) []fsm.HostCondition {
	if rep == nil {
		return nil
	}
	var out []fsm.HostCondition
	for _, f := range rep.Held {
		if f.Changed {
			out = append(out, fsm.HostCondition{Key: "held-changed:file:" + f.Path, Module: f.Module,
				Says:  fmt.Sprintf("held file %s %s", f.Path, orWords(f.Reason, report.ChangedBySomethingElse)),
				Ended: fmt.Sprintf("held file %s no longer changed by something else", f.Path)})
		}
	}
	if cr := report.Containers(rep); cr != nil {
		for _, c := range cr.Containers {
			if c.Changed && c.State == report.ContainerHeld {
				out = append(out, fsm.HostCondition{Key: "held-changed:container:" + c.Name, Module: c.Module,
					Says: fmt.Sprintf("held container %s %s", c.Name, orWords(c.Reason, report.ChangedBySomethingElse))})
			}
		}
	}
	if kind := activeAgain(rep); kind != "" {
		out = append(out, fsm.HostCondition{Key: "firewall-active-again:" + kind,
			Says:  fmt.Sprintf("the found firewall %s, retired at the flip, enabled again by something else", kind),
			Ended: fmt.Sprintf("the found firewall %s no longer active", kind)})
	}
	if st := tunnelState(rep); st != "" {
		out = append(out, fsm.HostCondition{Key: "tunnel:" + st, Module: report.MeshModule, Says: "tunnel " + st})
	}
	seen := map[string]bool{}
	for _, e := range rep.Errors {
		if strings.Contains(e.Reason, "stepped back") && !seen[e.Module] {
			seen[e.Module] = true
			out = append(out, fsm.HostCondition{Key: "stepped-back:" + e.Module, Module: e.Module,
				Says: fmt.Sprintf("take of %s stepped back: %s", e.Module, e.Reason)})
		}
	}
	return out
}

func orWords(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// hostEventsCheck is how often the leader compares the reports with the record's conditions.
const hostEventsCheck = time.Second

// recordHostEvents is the leader's loop: each node whose report's conditions are not those the
// record holds gets them committed. It looks only at the nodes whose report changed since its
// last look (and its own host's, and those whose proposal failed); a new term looks at every
// node once, since another leader may have recorded in between.
func (s *serverRole) recordHostEvents(ctx context.Context) {
	look := hostEventsLook{self: s.self.node.Name}
	s.leaderEvery(ctx, hostEventsCheck, func() {
		for _, h := range look.due(s.rec, s.fleet, s.rec.Figures().Term) {
			if _, _, err := s.rec.Propose("", fsm.OpHostEvents, h); err != nil {
				s.log.Warn("record host events", "node", h.Node, "err", err)
				look.retry[h.Node] = true
				continue
			}
			delete(look.retry, h.Node)
		}
	})
}

// hostEventsLook is what the leader's host-events loop remembers between looks: the term and
// the fleet's change sequence it last looked at, and the nodes to look at again (a proposal
// failed).
type hostEventsLook struct {
	self      string
	term, seq uint64
	retry     map[string]bool
}

// due is the host events to commit now: for each node whose report changed since the last look
// (every node in a new term), its report's conditions where the record holds others.
func (l *hostEventsLook) due(rec reader, fl *fleet, term uint64) []fsm.HostEvents {
	if term != l.term || l.retry == nil {
		l.term, l.seq, l.retry = term, 0, map[string]bool{}
	}
	changed, seq := fl.changedSince(l.seq)
	l.seq = seq
	look := map[string]bool{l.self: true}
	for _, n := range changed {
		look[n] = true
	}
	for n := range l.retry {
		look[n] = true
	}
	// The reports are read before the record: the fleet may ask gossip, which may read the record.
	conds := map[string][]fsm.HostCondition{}
	for name := range look {
		if rep := fl.report(name); rep != nil {
			conds[name] = hostConditions(rep)
		} else {
			delete(l.retry, name)
		}
	}
	var due []fsm.HostEvents
	rec.Read(func(r *fsm.Record, _ uint64) {
		for name, now := range conds {
			if r.Nodes[name] == nil {
				delete(l.retry, name)
				continue
			}
			if !fsm.SameConditions(now, r.StandingConditions(name)) {
				due = append(due, fsm.HostEvents{Node: name, Conditions: now})
			}
		}
	})
	sort.Slice(due, func(i, j int) bool { return due[i].Node < due[j].Node })
	return due
}

// postHistoryKeep serves `meshd history keep`: the history's bounds, committed.
func (s *recordAPI) postHistoryKeep(w http.ResponseWriter, req *http.Request) {
	var body fsm.HistoryKeepSet
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<16)).Decode(&body); err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "bad request: " + err.Error()})
		return
	}
	_, index, err := s.propose(req, fsm.OpHistoryKeep, body)
	committedAt(w, index)
	if err != nil {
		writeErr(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, historyView(s.rec, "", time.Now()))
}
