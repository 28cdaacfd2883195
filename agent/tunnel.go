package agent

// The private network's operator side (ADR 0105): reading a found tunnel into a take, `meshd
// tunnel take` on a running mesh, and `meshd tunnel show`. The record's part is fsm/tunnel.go;
// the machine's part is host's tunnel driver over wg/.

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"time"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/host/report"
	"meshd/pki"
	"meshd/wg"
)

// ReadFoundTunnel reads the found WireGuard interface iface on this machine into the take the
// record applies: its public key (the private key never leaves the machine through the record),
// its address with its range, its port and every peer.
func ReadFoundTunnel(node, iface string) (*fsm.TunnelTake, error) {
	f, err := wg.Discover(iface, "")
	if err != nil {
		return nil, fmt.Errorf("reading the tunnel to take over: %w", err)
	}
	take := &fsm.TunnelTake{Node: node, Interface: iface, PublicKey: f.PrivateKey.PublicKey().String(),
		Address: f.Address().String(), Port: uint16(f.ListenPort)}
	if !f.Address().IsValid() {
		take.Address = ""
	}
	for _, p := range f.Peers {
		fp := fsm.FoundPeer{PublicKey: p.PublicKey.String()}
		for _, a := range p.AllowedIPs {
			fp.AllowedIPs = append(fp.AllowedIPs, a.String())
		}
		if p.Endpoint.IsValid() {
			fp.Endpoint = p.Endpoint.String()
		}
		take.Peers = append(take.Peers, fp)
	}
	return take, nil
}

// TunnelTakeRequest is `meshd tunnel take NODE IFACE`, with the placement the operator asks for.
type TunnelTakeRequest struct {
	Node      string        `json:"node"`
	Interface string        `json:"interface"`
	Requested fsm.Placement `json:"requested"`
}

// postTunnelTake records a take. The hub's found tunnel is read where it runs, so for the hub
// NODE must be the node this agent is; a spoke's was presented when it enrolled (join --tunnel),
// so it is taken from any server, and the spoke's host checks it before stopping anything.
func (s *serverRole) postTunnelTake(w http.ResponseWriter, req *http.Request) {
	var in TunnelTakeRequest
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "malformed tunnel take: " + err.Error()})
		return
	}
	// A spoke presented its found tunnel at enrolment: the record already holds its key and
	// address, and the spoke's host checks the found interface is that one before stopping it.
	spoke, known := false, false
	s.fsm.Read(func(r *fsm.Record, _ uint64) {
		n := r.Nodes[in.Node]
		known = n != nil
		spoke = n != nil && r.Tunnel.Hub != "" && n.Name != r.Tunnel.Hub && n.FoundTunnel != ""
	})
	take := &fsm.TunnelTake{Node: in.Node, Interface: in.Interface}
	switch {
	case spoke:
	case !known && in.Node != s.node.Name:
		writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("node %s: not in the record (meshd status lists the nodes); a machine enrols with meshd join first (--tunnel %s to present its found tunnel), then its tunnel is taken over", in.Node, in.Interface)})
		return
	case in.Node != s.node.Name:
		writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("node %s: its found tunnel is read on its own machine; run `meshd tunnel take %s %s` there (this is %s)", in.Node, in.Node, in.Interface, s.node.Name)})
		return
	default:
		var err error
		if take, err = ReadFoundTunnel(in.Node, in.Interface); err != nil {
			writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("node %s: %v", in.Node, err)})
			return
		}
	}
	take.Requested = in.Requested
	if !spoke { // the hub's own key moves: it announces the move, signed with its identity
		s.fsm.Read(func(r *fsm.Record, _ uint64) { announceTake(r, take, s.secrets.NodeKey) })
	}
	v, index, err := s.raft.applyAt(fsm.OpTunnelTake, take, applyTimeout)
	committedAt(w, index)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
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

// TunnelView is `meshd tunnel show` (and the tunnel part of `meshd status`): the record's private
// network and the hub's tunnel as the hub's host last reported it. Any server composes it from
// the hub's signed report that gossip carried to it, so it says the same on every server.
type TunnelView struct {
	Range      string `json:"range"`
	Hub        string `json:"hub"`
	HubAddress string `json:"hub_address"`
	Port       uint16 `json:"port,omitempty"`
	// Taken is the found interface the hub took over ("" when none).
	Taken string `json:"taken,omitempty"`
	// State is the hub's tunnel state from its last report (report.TunnelFoundUp, TunnelMeshUp,
	// TunnelDark), "" when it has not reported one.
	State string `json:"state,omitempty"`
	Says  string `json:"says,omitempty"`
	// Reason is why, when the hub's report has a tunnel error.
	Reason string `json:"reason,omitempty"`
	// ReportAt is when the hub made the report the peers' liveness comes from; ReportFrom how it
	// reached the answering server (local, gossip, bus), "" when there is none.
	ReportAt   time.Time    `json:"report_at,omitzero"`
	ReportFrom string       `json:"report_from,omitempty"`
	Peers      []TunnelPeer `json:"peers"`
}

// TunnelPeer is one peer of the tunnel: carried (not a node yet) or enrolled (a node now), with
// when the hub last heard from it and the bytes moved, as the hub's device counts them.
type TunnelPeer struct {
	PublicKey     string    `json:"public_key"`
	Address       string    `json:"address"`
	Enrolled      bool      `json:"enrolled"`
	Node          string    `json:"node,omitempty"`
	Endpoint      string    `json:"endpoint,omitempty"`
	LastHandshake time.Time `json:"last_handshake,omitzero"`
	// LastHeard is the later of its last handshake and the hub's last pass that saw it send.
	LastHeard     time.Time `json:"last_heard,omitzero"`
	ReceiveBytes  int64     `json:"rx_bytes"`
	TransmitBytes int64     `json:"tx_bytes"`
}

func (s *serverRole) getTunnel(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.tunnelView())
}

// tunnelView composes the tunnel view from the record and the hub's report as this server has it.
func (s *serverRole) tunnelView() TunnelView {
	var v TunnelView
	var hub string
	s.fsm.Read(func(r *fsm.Record, _ uint64) { hub = r.Tunnel.Hub })
	rep, from := s.reportFrom(hub)
	s.fsm.Read(func(r *fsm.Record, _ uint64) { v = tunnelViewOf(r, rep, from) })
	return v
}

// tunnelViewOf is the tunnel view of record r with the hub's report rep (nil: none yet), which
// reached the answering server by from. Every peer the record knows is listed, carried or
// enrolled; the report adds what the hub's device says of it.
func tunnelViewOf(r *fsm.Record, rep *report.Report, from string) TunnelView {
	t := r.Tunnel
	v := TunnelView{Range: t.Range, Hub: t.Hub, HubAddress: t.HubAddress, Taken: t.Taken, Peers: []TunnelPeer{}}
	if hub := r.Nodes[t.Hub]; hub != nil {
		v.Port, _ = fsm.MeshPort(r, hub, "tunnel")
	}
	for _, c := range t.Carried {
		v.Peers = append(v.Peers, TunnelPeer{PublicKey: c.PublicKey, Address: c.Address, Endpoint: c.Endpoint})
	}
	for _, name := range r.NodeNames() {
		n := r.Nodes[name]
		if n.WireGuardKey != "" && name != t.Hub {
			v.Peers = append(v.Peers, TunnelPeer{PublicKey: n.WireGuardKey, Address: n.Address, Enrolled: true, Node: name})
		}
	}
	var det report.TunnelDetail
	if rep != nil && decodeInto(rep.Kinds[fsm.KindTunnel], &det) {
		v.State, v.Says, v.Reason = det.State, det.Says, det.Reason
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
	if rep == nil {
		return ""
	}
	var det report.TunnelDetail
	if raw, ok := rep.Kinds[fsm.KindTunnel]; ok && decodeInto(raw, &det) {
		return det.State
	}
	return ""
}

// decodeInto decodes a driver's part of a report (a typed value locally, generic JSON when it
// came by gossip or the bus) into its type.
func decodeInto(raw any, into any) bool {
	b, err := json.Marshal(raw)
	return err == nil && raw != nil && json.Unmarshal(b, into) == nil
}

// genesisTake reads the found tunnel genesis takes over, with the operator's own tunnel port and
// range (when given) as the placement asked for, and refuses a disagreement before anything is
// written.
func genesisTake(opts GenesisOptions, settings map[string]string) (*fsm.TunnelTake, error) {
	take, err := ReadFoundTunnel(opts.Name, opts.TakeTunnel)
	if err != nil {
		return nil, fmt.Errorf("--take-tunnel %s: %w", opts.TakeTunnel, err)
	}
	if v := settings[catalogue.MeshModule+".tunnel"]; v != "" {
		if take.Requested.Port, err = catalogue.ParsePort(v); err != nil {
			return nil, fmt.Errorf("setting mesh.tunnel: %w", err)
		}
	}
	take.Requested.Range = settings[catalogue.MeshModule+".range"]
	if err := fsm.CheckTake(take); err != nil {
		return nil, fmt.Errorf("--take-tunnel %s: %w", opts.TakeTunnel, err)
	}
	return take, nil
}
