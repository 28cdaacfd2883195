package agent

// The private network's operator side (ADR 0105): `meshd tunnel take` on a running mesh, and
// `meshd tunnel show`; reading a found tunnel into a take is setup's (setup.ReadFoundTunnel). The record's part is fsm/tunnel.go;
// the machine's part is host's tunnel driver over wg/.

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/pki"
	"meshd/report"
	"meshd/setup"
)

// postTunnelTake records a take. The hub's found tunnel is read where it runs, so for the hub
// NODE must be the node this agent is; a spoke's was presented when it enrolled (join --tunnel),
// so it is taken from any server, and the spoke's host checks it before stopping anything.
func (s *recordAPI) postTunnelTake(w http.ResponseWriter, req *http.Request) {
	var in api.TunnelTakeRequest
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "malformed tunnel take: " + err.Error()})
		return
	}
	// A spoke presented its found tunnel at enrolment: the record already holds its key and
	// address, and the spoke's host checks the found interface is that one before stopping it.
	spoke, known := false, false
	s.rec.Read(func(r *fsm.Record, _ uint64) {
		n := r.Nodes[in.Node]
		known = n != nil
		spoke = n != nil && r.Tunnel.Hub != "" && n.Name != r.Tunnel.Hub && n.FoundTunnel != ""
	})
	take := &fsm.TunnelTake{Node: in.Node, Interface: in.Interface}
	switch {
	case spoke:
	case !known && in.Node != s.node.Name:
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: fmt.Sprintf("node %s: not in the record (meshd status lists the nodes); a machine enrols with meshd join first (--tunnel %s to present its found tunnel), then its tunnel is taken over", in.Node, in.Interface)})
		return
	case in.Node != s.node.Name:
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: fmt.Sprintf("node %s: its found tunnel is read on its own machine; run `meshd tunnel take %s %s` there (this is %s)", in.Node, in.Node, in.Interface, s.node.Name)})
		return
	default:
		var err error
		take, err = setup.ReadFoundTunnel(in.Node, in.Interface)
		if merr := setup.TunnelManaged(req.Context(), in.Interface, int(in.Requested.Port), s.dockerHost); merr != nil {
			err = merr // refused before the take is recorded; the hub's driver asks again before it stops anything
		}
		if err == nil {
			err = setup.Uncarried(in.Interface)
		}
		if err != nil {
			api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: fmt.Sprintf("node %s: %v", in.Node, err)})
			return
		}
	}
	take.Requested = in.Requested
	if in.DryRun {
		s.previewTake(w, in, spoke)
		return
	}
	if !spoke { // the hub's own key moves: it announces the move, signed with its identity
		s.rec.Read(func(r *fsm.Record, _ uint64) { announceTake(r, take, s.secrets.NodeKey) })
	}
	v, index, err := s.propose(req, fsm.OpTunnelTake, take)
	committedAt(w, index)
	if err != nil {
		writeErr(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, v)
}

// previewTake answers a take's --dry-run: the hub's found tunnel read here, a spoke's from its
// last report (its host reads it on every pass while it rides it).
func (s *recordAPI) previewTake(w http.ResponseWriter, in api.TunnelTakeRequest, spoke bool) {
	v := api.TunnelTakePreview{Node: in.Node, Interface: in.Interface, Fields: []report.TunnelField{}}
	if !spoke {
		fields, err := setup.TunnelPreview(in.Interface)
		if err != nil {
			api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: fmt.Sprintf("node %s: %v", in.Node, err)})
			return
		}
		v.Fields, v.From = fields, "read on "+s.node.Name+" now"
		api.WriteJSON(w, http.StatusOK, v)
		return
	}
	rep, from := s.fleet.reportFrom(in.Node)
	det, ok := tunnelDetail(rep)
	if !ok || det.Found != in.Interface || len(det.Fields) == 0 {
		api.WriteJSON(w, http.StatusConflict, api.ErrorBody{Error: fmt.Sprintf("node %s: its report does not show %s yet (its host reads it on each pass while the node rides it); try again in a moment, or see meshd node show %s", in.Node, in.Interface, in.Node)})
		return
	}
	v.Fields, v.From = det.Fields, fmt.Sprintf("node %s's report of %s (%s)", in.Node, rep.When.UTC().Format(time.RFC3339), from)
	api.WriteJSON(w, http.StatusOK, v)
}

// announceTake signs the take's move of the node's overlay key with the node's identity id: from
// the key record r holds for it now to the found tunnel's. The record moves the key only if this
// verifies against the node's recorded identity (a node that enrolled before keeps its identity
// and takes the tunnel's key as its overlay key).
func announceTake(r *fsm.Record, take *fsm.TunnelTake, id ed25519.PrivateKey) {
	previous := ""
	if n := r.Nodes[take.Node]; n != nil {
		previous = n.WireGuardKey
	}
	take.Announcement = pki.AnnounceKey(id, take.Node, previous, take.PublicKey)
}

func (s *recordAPI) getTunnel(w http.ResponseWriter, _ *http.Request) {
	api.WriteJSON(w, http.StatusOK, s.fleet.tunnel())
}

// tunnelViewOf is the tunnel view of record r with the hub's report rep (nil: none yet), which
// reached the answering server by from. Every peer the record knows is listed, carried or
// enrolled; the report adds what the hub's device says of it.
func tunnelViewOf(r *fsm.Record, rep *report.Report, from string) api.TunnelView {
	t := r.Tunnel
	v := api.TunnelView{Range: t.Range, Hub: t.Hub, HubAddress: t.HubAddress, Taken: t.Taken, Peers: []api.TunnelPeer{}}
	if hub := r.Nodes[t.Hub]; hub != nil {
		v.Port, _ = fsm.MeshPort(r, hub, "tunnel")
	}
	for _, c := range t.Carried {
		v.Peers = append(v.Peers, api.TunnelPeer{PublicKey: c.PublicKey, Address: c.Address, Endpoint: c.Endpoint})
	}
	for _, name := range r.NodeNames() {
		n := r.Nodes[name]
		if n.WireGuardKey != "" && name != t.Hub {
			v.Peers = append(v.Peers, api.TunnelPeer{PublicKey: n.WireGuardKey, Address: n.Address, Enrolled: true, Node: name})
		}
	}
	var det report.TunnelDetail
	if rep != nil && api.DecodeInto(rep.Kinds[fsm.KindTunnel], &det) {
		v.State, v.Says, v.Reason = det.State, det.Says, det.Reason
		v.Interface, v.Fields, v.FoundUnit, v.Hooks = det.Interface, det.Fields, det.FoundUnit, det.Hooks
		v.ReportAt, v.ReportFrom = rep.When, from
		seen := map[string]report.TunnelPeer{}
		for _, p := range det.Peers {
			seen[p.PublicKey] = p
		}
		for i := range v.Peers {
			p, ok := seen[v.Peers[i].PublicKey]
			if !ok {
				continue
			}
			q := &v.Peers[i]
			q.LastHandshake, q.LastHeard, q.ReceiveBytes, q.TransmitBytes = p.LastHandshake, p.LastHeard, p.ReceiveBytes, p.TransmitBytes
			if q.LastHeard.IsZero() {
				q.LastHeard = p.LastHandshake // a hub that reports no last_heard yet
			}
			if p.Endpoint != "" {
				q.Endpoint = p.Endpoint
			}
		}
	}
	sort.SliceStable(v.Peers, func(i, j int) bool { return addrLess(v.Peers[i].Address, v.Peers[j].Address) })
	return v
}

// addrLess orders addresses as addresses (10.44.0.2 before 10.44.0.10), text that is not one last.
func addrLess(a, b string) bool {
	x, errx := netip.ParseAddr(a)
	y, erry := netip.ParseAddr(b)
	switch {
	case errx == nil && erry == nil:
		return x.Less(y)
	case errx == nil || erry == nil:
		return errx == nil
	}
	return a < b
}

// tunnelState is a node's tunnel state from its report ("" when it reports none).
func tunnelState(rep *report.Report) string {
	det, _ := tunnelDetail(rep)
	return det.State
}

// tunnelDetail is the tunnel part of a node's report; ok is false when it has none.
func tunnelDetail(rep *report.Report) (det report.TunnelDetail, ok bool) {
	if rep == nil {
		return det, false
	}
	raw, ok := rep.Kinds[fsm.KindTunnel]
	ok = ok && api.DecodeInto(raw, &det)
	return det, ok
}
