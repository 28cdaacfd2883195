package agent

// A module assigned or taken on many nodes (fsm.OpModuleAssignMany, OpModuleTakeMany): the
// operator's selector resolved to node names here, each node judged as the record would judge it
// (fsm.TryModuleOn) and, for a take, previewed against its latest report; then one command for
// every node that changes. Where the module stands on each node it is assigned to is served
// beside it, counted first.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/host/preview"
	"meshd/report"
)

// selection is the nodes a request selects, sorted, and the selection in the operator's words.
func selection(r *fsm.Record, in api.ModuleManyRequest) ([]string, string, error) {
	var words []string
	chosen := map[string]bool{}
	if in.All {
		words = append(words, "--all")
		for _, name := range r.NodeNames() {
			chosen[name] = true
		}
	}
	if len(in.Nodes) > 0 {
		words = append(words, "--nodes "+strings.Join(in.Nodes, ","))
		for _, name := range in.Nodes {
			if name = strings.TrimSpace(name); name != "" {
				chosen[name] = true
			}
		}
	}
	for _, glob := range in.Match {
		if _, err := path.Match(glob, ""); err != nil {
			return nil, "", fmt.Errorf("--match %q: %v", glob, err)
		}
		words = append(words, "--match "+glob)
		matched := false
		for _, name := range r.NodeNames() {
			if ok, _ := path.Match(glob, name); ok {
				chosen[name], matched = true, true
			}
		}
		if !matched {
			return nil, "", fmt.Errorf("--match %q matches no node (the record has %d: meshd status --list lists them)", glob, len(r.Nodes))
		}
	}
	if len(words) == 0 {
		return nil, "", errors.New("select the nodes: --nodes a,b,c, --match 'GLOB' (repeatable) or --all")
	}
	out := make([]string, 0, len(chosen))
	for name := range chosen {
		out = append(out, name)
	}
	sort.Strings(out)
	return out, strings.Join(words, " "), nil
}

// judgeMany says what assigning or taking module changes on each selected node, read from r.
func judgeMany(r *fsm.Record, action, module string, names []string) []api.ModuleManyNode {
	out := make([]api.ModuleManyNode, 0, len(names))
	for _, name := range names {
		v := api.ModuleManyNode{Node: name}
		n := r.Nodes[name]
		if n == nil {
			v.Change, v.Why = api.ChangeRefused, "no such node"
			out = append(out, v)
			continue
		}
		v.Mode = n.Mode
		op := fsm.OpModuleAssign
		switch {
		case action == "assign" && slices.Contains(n.Assigned, module):
			v.Change, v.Why = api.ChangeNone, "already assigned"
		case action == "take" && slices.Contains(n.EffectiveTaken(), module):
			v.Change, v.Why = api.ChangeNone, "already taken"
		case action == "take":
			op, v.Change = fsm.OpModuleTake, api.ChangeTake
		case n.Target() == fsm.Converged:
			v.Change, v.Why = api.ChangeAssignTake, "converged: what the module declares converges at once"
		default:
			v.Change, v.Why = api.ChangeAssign, "prepared: what the machine lacks is created, what is found is held"
		}
		if v.Change != api.ChangeNone {
			if _, err := fsm.TryModuleOn(r, op, name, module); err != nil {
				v.Change, v.Why = api.ChangeRefused, refusalReason(err)
			}
		}
		out = append(out, v)
	}
	return out
}

// refusalReason is a refusal's reason alone: the node and module are said beside it.
func refusalReason(err error) string {
	var ref *fsm.Refusal
	if errors.As(err, &ref) {
		return ref.Reason
	}
	return err.Error()
}

// manyActs are the record API's many-node acts and what it says of a module on its nodes: a job
// of its own, beside the record API it reads through.
type manyActs struct{ s *recordAPI }

// act serves POST /v1/modules/{module}/assign and /take: the preview, or the one command.
func (m manyActs) act(action string) http.HandlerFunc {
	s := m.s
	return func(w http.ResponseWriter, req *http.Request) {
		module := req.PathValue("module")
		var in api.ModuleManyRequest
		if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
			api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "malformed module " + action + ": " + err.Error()})
			return
		}
		v := api.ModuleManyView{Module: module, Action: action, Preview: in.Preview}
		var err error
		var takes []string
		var trial *fsm.Record
		s.rec.Read(func(r *fsm.Record, _ uint64) {
			if r.Catalogue[module] == nil {
				err = notFound(fmt.Sprintf("module %s: not in the catalogue (it has: %s)", module, strings.Join(r.Catalogue.Names(), ", ")))
				return
			}
			var names []string
			if names, v.Selector, err = selection(r, in); err != nil {
				return
			}
			v.Nodes = judgeMany(r, action, module, names)
			for _, n := range v.Nodes {
				if n.Change == api.ChangeTake {
					takes = append(takes, n.Node)
				}
			}
			if len(takes) > 0 {
				trial, err = takenTrial(r, module, takes)
			}
		})
		if err != nil {
			if _, ok := err.(notFound); !ok {
				err = &fsm.Refusal{Module: module, Reason: err.Error()}
			}
			writeErr(w, err)
			return
		}
		if trial != nil {
			m.previewTakes(req.Context(), trial, module, v.Nodes)
		}
		v.Counts = map[string]int{}
		var body fsm.ModuleOnNodes
		body.Module, body.Selector = module, v.Selector
		var lossy []string
		for _, n := range v.Nodes {
			v.Counts[n.Change]++
			if n.Change == api.ChangeNone {
				continue
			}
			body.Nodes = append(body.Nodes, n.Node)
			if len(n.Losses) > 0 {
				lossy = append(lossy, fmt.Sprintf("node %s: %s", n.Node, strings.Join(n.Losses, "; ")))
				if body.AcceptLoss == nil {
					body.AcceptLoss = map[string][]string{}
				}
				body.AcceptLoss[n.Node] = n.Losses
			}
		}
		if in.Preview || len(body.Nodes) == 0 {
			api.WriteJSON(w, http.StatusOK, v)
			return
		}
		if len(lossy) > 0 && !in.AcceptLoss {
			api.WriteJSON(w, http.StatusConflict, api.ErrorBody{Error: fmt.Sprintf(
				"taking %s would lose what found containers have and the module does not declare, on %d node(s):\n  %s\n"+
					"declare them in the module (--preview lists each difference), or accept the loss: --accept-loss (recorded in the history, with who)",
				module, len(lossy), strings.Join(lossy, "\n  "))})
			return
		}
		op := fsm.OpModuleAssignMany
		if action == "take" {
			op = fsm.OpModuleTakeMany
		}
		_, index, err := s.propose(req, op, body)
		committedAt(w, index)
		if err != nil {
			writeErr(w, err)
			return
		}
		v.Index = index
		api.WriteJSON(w, http.StatusOK, v)
	}
}

// takenTrial is a copy of r with module taken on every node of takes, each of which
// fsm.TryModuleOn accepted: the declarations a take preview reads from.
func takenTrial(r *fsm.Record, module string, takes []string) (*fsm.Record, error) {
	b, err := r.Marshal()
	if err != nil {
		return nil, err
	}
	trial, err := fsm.UnmarshalRecord(b)
	if err != nil {
		return nil, err
	}
	cmd, err := fsm.Encode(fsm.OpModuleTakeMany, time.Now(), fsm.ModuleOnNodes{Module: module, Nodes: takes})
	if err != nil {
		return nil, err
	}
	if _, err := fsm.Apply(trial, cmd); err != nil {
		return nil, err
	}
	return trial, nil
}

// previewTakes fills in what the take replaces on each node taking it, from its latest report.
// A report made before the node knew of the module's assignment is waited for (up to
// reportBehindWait for all of them together), as the one-node preview does.
func (m manyActs) previewTakes(ctx context.Context, trial *fsm.Record, module string, nodes []api.ModuleManyNode) {
	deadline := time.Now().Add(reportBehindWait)
	for i := range nodes {
		n := &nodes[i]
		if n.Change != api.ChangeTake {
			continue
		}
		d, err := fsm.Compose(trial, n.Node)
		if err != nil {
			n.TakeError = err.Error()
			continue
		}
		for {
			pv, err := preview.Take(m.s.fleet.report(n.Node), d, module)
			var behind *preview.ReportBehindError
			if errors.As(err, &behind) && time.Now().Before(deadline) {
				select {
				case <-ctx.Done():
				case <-time.After(reportBehindPoll):
					continue
				}
			}
			if err != nil {
				n.TakeError = err.Error()
				break
			}
			n.Take, n.Losses = &pv, pv.Losses()
			n.Why = fmt.Sprintf("replaces %d found container(s) and %d found file(s), creates %d, guards %d opening(s)",
				len(pv.Containers), len(pv.Files), len(pv.Created), len(pv.Guarded))
			break
		}
	}
}

// nodes serves GET /v1/modules/{module}/nodes: where the module stands on each node it is
// assigned to, with ?nodes=a,b (only those) and ?state=S (only those in state S).
func (m manyActs) nodes(w http.ResponseWriter, req *http.Request) {
	s := m.s
	module := req.PathValue("module")
	q := req.URL.Query()
	only := map[string]bool{}
	for _, name := range strings.Split(q.Get("nodes"), ",") {
		if name != "" {
			only[name] = true
		}
	}
	state := q.Get("state")
	if state != "" && state != report.InForce && state != report.Pending && state != report.Failed {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: fmt.Sprintf("state %q: give %q, %q or %q", state, report.InForce, report.Pending, report.Failed)})
		return
	}
	v := api.ModuleNodesView{Module: module, Counts: map[string]int{}, Nodes: []api.ModuleOnNode{}}
	var err error
	s.rec.Read(func(r *fsm.Record, index uint64) {
		v.Index = index
		if r.Catalogue[module] == nil {
			err = notFound(fmt.Sprintf("module %s: not in the catalogue (it has: %s)", module, strings.Join(r.Catalogue.Names(), ", ")))
			return
		}
		for _, name := range r.NodeNames() {
			n := r.Nodes[name]
			if slices.Contains(n.Assigned, module) && (len(only) == 0 || only[name]) {
				v.Nodes = append(v.Nodes, api.ModuleOnNode{Node: name, Mode: n.Mode, Taken: slices.Contains(n.EffectiveTaken(), module)})
			}
		}
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	kept := v.Nodes[:0]
	for _, n := range v.Nodes {
		n.State, n.Why = report.ModuleOn(s.fleet.report(n.Node), module, n.Taken)
		v.Counts[n.State]++
		if state == "" || n.State == state {
			kept = append(kept, n)
		}
	}
	v.Nodes = kept
	api.WriteJSON(w, http.StatusOK, v)
}

// moduleStates are the modules assigned to a node, each with where it stands there, read from
// its latest report rep.
func moduleStates(rep *report.Report, assigned, taken []string) map[string]string {
	if len(assigned) == 0 {
		return nil
	}
	out := make(map[string]string, len(assigned))
	for _, m := range assigned {
		out[m], _ = report.ModuleOn(rep, m, slices.Contains(taken, m))
	}
	return out
}
