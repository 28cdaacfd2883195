package setup

// Reading a found WireGuard tunnel into the take the record applies (ADR 0105): at genesis
// (--take-tunnel), and by the agent for `meshd tunnel take` on the hub.

import (
	"fmt"
	"meshd/catalogue"
	"meshd/fsm"
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
