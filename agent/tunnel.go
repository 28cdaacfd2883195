package agent

// The private network's operator side (ADR 0105): reading a found tunnel into a take, `meshd
// tunnel take` on a running mesh, and `meshd tunnel show`. The record's part is fsm/tunnel.go;
// the machine's part is host's tunnel driver over wg/.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/host"
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

// postTunnelTake reads the found tunnel on this machine and records the take. The tunnel is read
// where it runs, so NODE must be the node this agent is.
func (s *serverRole) postTunnelTake(w http.ResponseWriter, req *http.Request) {
	var in TunnelTakeRequest
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "malformed tunnel take: " + err.Error()})
		return
	}
	if in.Node != s.node.Name {
		writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("node %s: its found tunnel is read on its own machine; run `meshd tunnel take %s %s` there (this is %s)", in.Node, in.Node, in.Interface, s.node.Name)})
		return
	}
	take, err := ReadFoundTunnel(in.Node, in.Interface)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("node %s: %v", in.Node, err)})
		return
	}
	take.Requested = in.Requested
	v, index, err := s.raft.applyAt(fsm.OpTunnelTake, take, applyTimeout)
	committedAt(w, index)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// TunnelView is `meshd tunnel show`: the record's private network and the hub's tunnel as its
// host last reported it.
type TunnelView struct {
	Range      string `json:"range"`
	Hub        string `json:"hub"`
	HubAddress string `json:"hub_address"`
	Port       uint16 `json:"port,omitempty"`
	// Taken is the found interface the hub took over ("" when none).
	Taken string `json:"taken,omitempty"`
	// State is the hub's tunnel state from its last report (host.TunnelFoundUp, TunnelMeshUp,
	// TunnelDark), "" when it has not reported one.
	State string `json:"state,omitempty"`
	Says  string `json:"says,omitempty"`
	// Reason is why, when the hub's report has a tunnel error.
	Reason string       `json:"reason,omitempty"`
	Peers  []TunnelPeer `json:"peers"`
}

// TunnelPeer is one peer of the tunnel: carried (not a node yet) or enrolled (a node now), with
// when the hub last heard from it.
type TunnelPeer struct {
	PublicKey     string    `json:"public_key"`
	Address       string    `json:"address"`
	Enrolled      bool      `json:"enrolled"`
	Node          string    `json:"node,omitempty"`
	Endpoint      string    `json:"endpoint,omitempty"`
	LastHandshake time.Time `json:"last_handshake,omitzero"`
	ReceiveBytes  int64     `json:"rx_bytes"`
	TransmitBytes int64     `json:"tx_bytes"`
}

func (s *serverRole) getTunnel(w http.ResponseWriter, _ *http.Request) {
	var v TunnelView
	s.fsm.Read(func(r *fsm.Record, _ uint64) {
		t := r.Tunnel
		v = TunnelView{Range: t.Range, Hub: t.Hub, HubAddress: t.HubAddress, Taken: t.Taken, Peers: []TunnelPeer{}}
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
	})
	if rep := s.report(v.Hub); rep != nil {
		var det host.TunnelDetail
		if raw, ok := rep.Kinds[fsm.KindTunnel]; ok && decodeInto(raw, &det) {
			v.State, v.Says, v.Reason = det.State, det.Says, det.Reason
			seen := map[string]host.TunnelPeer{}
			for _, p := range det.Peers {
				seen[p.PublicKey] = p
			}
			for i := range v.Peers {
				if p, ok := seen[v.Peers[i].PublicKey]; ok {
					v.Peers[i].LastHandshake, v.Peers[i].ReceiveBytes, v.Peers[i].TransmitBytes = p.LastHandshake, p.ReceiveBytes, p.TransmitBytes
					if p.Endpoint != "" {
						v.Peers[i].Endpoint = p.Endpoint
					}
				}
			}
		}
	}
	sort.SliceStable(v.Peers, func(i, j int) bool { return v.Peers[i].Address < v.Peers[j].Address })
	writeJSON(w, http.StatusOK, v)
}

// tunnelState is a node's tunnel state from its report ("" when it reports none).
func tunnelState(rep *host.Report) string {
	if rep == nil {
		return ""
	}
	var det host.TunnelDetail
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
