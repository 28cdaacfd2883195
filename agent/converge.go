package agent

// Converging a node and returning it to adopted (ADR 0100's last step), on a server. The preview
// composes the node's declaration from the record and reads it against the node's latest host
// report (preview.Converge), changing nothing; it remembers what each plan token it handed
// out was made from, so a flip with a stale token is refused naming what changed. The flip and
// the return are recorded as an intent (fsm.OpFlip) that the node's host carries out; the leader
// records the node in its new mode (fsm.OpFlipDone) once the node's report says it is done.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/host/preview"
	"meshd/report"
)

// plans remembers the previews a server handed out, by plan token, so that a stale token can be
// named: what changed since. It keeps the latest few.
type plans struct {
	mu    sync.Mutex
	byTok map[string]report.ConvergePreview
	order []string
}

const plansKept = 64

func (p *plans) keep(pv report.ConvergePreview) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byTok == nil {
		p.byTok = map[string]report.ConvergePreview{}
	}
	if _, ok := p.byTok[pv.Token]; !ok {
		p.order = append(p.order, pv.Token)
	}
	p.byTok[pv.Token] = pv
	for len(p.order) > plansKept {
		delete(p.byTok, p.order[0])
		p.order = p.order[1:]
	}
}

func (p *plans) get(token string) (report.ConvergePreview, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pv, ok := p.byTok[token]
	return pv, ok
}

// previewOf composes node's converge preview from the record and its latest report.
func (s *recordAPI) previewOf(node string) (report.ConvergePreview, error) {
	var d *fsm.Declaration
	var err error
	s.rec.Read(func(r *fsm.Record, _ uint64) {
		d, err = fsm.Compose(r, node)
	})
	if err != nil {
		return report.ConvergePreview{}, err
	}
	pv, err := preview.Converge(s.fleet.report(node), d)
	if err != nil {
		return pv, notFound(err.Error())
	}
	s.plans.keep(pv)
	return pv, nil
}

// convergePreview serves `meshd converge NODE --preview`.
func (s *recordAPI) convergePreview(w http.ResponseWriter, req *http.Request) {
	pv, err := s.previewOf(req.PathValue("node"))
	if err != nil {
		writeErr(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, pv)
}

// checkPlan refuses a flip whose plan token does not match the node as it is now, naming what
// changed; without a token, it refuses when anything will close.
func checkPlan(node, plan string, now report.ConvergePreview, was func(string) (report.ConvergePreview, bool)) *api.StaleRefusal {
	switch {
	case plan == "" && now.WillClose > 0:
		return &api.StaleRefusal{Node: node, Preview: &now, Reason: fmt.Sprintf(
			"%d listening socket(s) and published port(s) will close; read `meshd converge %s --preview` and give the plan token it ends with (--plan TOKEN) to close them", now.WillClose, node)}
	case plan == "" || plan == now.Token:
		return nil
	}
	ref := &api.StaleRefusal{Node: node, Preview: &now, Reason: fmt.Sprintf(
		"the node changed since the preview of plan %s (now plan %s); preview again and read it", plan, now.Token)}
	if old, ok := was(plan); ok {
		ref.Changes = report.PlanChanges(old, now)
	} else {
		ref.Reason = fmt.Sprintf("plan %s is not the node as it is now (plan %s), and this server did not make that preview, so it cannot say what changed; preview again and read it", plan, now.Token)
	}
	return ref
}

// postConverge serves `meshd converge NODE [--plan TOKEN]`: the preview made again and checked
// against the plan, then the flip recorded as an intent.
func (s *recordAPI) postConverge(w http.ResponseWriter, req *http.Request) {
	node := req.PathValue("node")
	var body api.ConvergeRequest
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<20)).Decode(&body); err != nil && err != io.EOF {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "converge request: " + err.Error()})
		return
	}
	pending := false
	s.rec.Read(func(r *fsm.Record, _ uint64) {
		if n := r.Nodes[node]; n != nil && n.Flip != nil && n.Flip.To == fsm.Converged {
			pending = true
		}
	})
	pv, err := s.previewOf(node)
	if err != nil {
		writeErr(w, err)
		return
	}
	if !pending && !pv.Converged { // a flip recorded is finished whatever the node reports now;
		// a converged node's is refused by the record, as already converged
		ref := checkPlan(node, body.Plan, pv, s.plans.get)
		if ref == nil && strings.HasPrefix(pv.Firewall.Retire, "cannot be retired") {
			ref = &api.StaleRefusal{Node: node, Preview: &pv, Reason: "the found firewall " + pv.Firewall.Retire}
		}
		if ref == nil && len(pv.Losses) > 0 && !body.AcceptLoss {
			ref = &api.StaleRefusal{Node: node, Preview: &pv, Reason: fmt.Sprintf(
				"converging %s takes modules whose found containers would lose what the modules do not declare:\n  %s\n"+
					"declare them in the modules, or accept the loss: meshd converge %s --accept-loss (recorded in the history, with who)",
				node, strings.Join(pv.Losses, "\n  "), node)}
		}
		if ref != nil {
			api.WriteJSON(w, http.StatusConflict, api.ConvergeRefused{Error: ref.Error(), Refusal: ref})
			return
		}
	}
	flip := fsm.Flip{Node: node, To: fsm.Converged, Plan: pv.Token, Takes: pv.Take}
	if body.AcceptLoss {
		flip.AcceptLoss = pv.Losses
	}
	v, _, err := s.propose(req, fsm.OpFlip, flip)
	if err != nil {
		writeErr(w, err)
		return
	}
	n, _ := v.(*fsm.Node)
	api.WriteJSON(w, http.StatusOK, api.FlipView{Node: n, Preview: &pv})
}

// postAdopt serves `meshd adopt NODE`: the return recorded as an intent.
func (s *recordAPI) postAdopt(w http.ResponseWriter, req *http.Request) {
	v, _, err := s.propose(req, fsm.OpFlip, fsm.Flip{Node: req.PathValue("node"), To: fsm.Adopted})
	if err != nil {
		writeErr(w, err)
		return
	}
	n, _ := v.(*fsm.Node)
	api.WriteJSON(w, http.StatusOK, api.FlipView{Node: n})
}

// flipCheck is how often the leader looks for a pending flip its node reports done.
const flipCheck = 250 * time.Millisecond

// leaderEvery runs fn every interval while this server leads, once its record has caught up
// with the log: the shape of each of the leader's own loops (finishing flips, recording host
// events). It returns when ctx ends.
func (s *serverRole) leaderEvery(ctx context.Context, interval time.Duration, fn func()) {
	if err := s.rec.WaitCaughtUp(ctx); err != nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.rec.IsLeader() {
			fn()
		}
	}
}

// finishFlips is the leader's part of every flip: once a node's report says it carried out its
// pending flip (the one recorded at that time, to that mode), the node is recorded in that mode.
// A leader that changes mid-way leaves the intent in the record; the next leader finishes it.
func (s *serverRole) finishFlips(ctx context.Context) {
	s.leaderEvery(ctx, flipCheck, func() {
		var pending []fsm.FlipDone
		s.rec.Read(func(r *fsm.Record, _ uint64) {
			for _, name := range r.NodeNames() {
				if f := r.Nodes[name].Flip; f != nil {
					pending = append(pending, fsm.FlipDone{Node: name, To: f.To, Since: f.Since})
				}
			}
		})
		for _, p := range pending {
			fv := report.ReportFlip(s.fleet.report(p.Node))
			if fv == nil || !fv.Done || fv.To != p.To || !fv.Since.Equal(p.Since) {
				continue
			}
			if _, _, err := s.rec.Propose("", fsm.OpFlipDone, p); err != nil {
				s.log.Warn("record a finished flip", "node", p.Node, "to", p.To, "err", err)
				continue
			}
			s.log.Info("node flipped", "node", p.Node, "mode", p.To)
		}
	})
}
