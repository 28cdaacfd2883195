package setup

// Reading a found WireGuard tunnel into the take the record applies (ADR 0105): at genesis
// (--take-tunnel), and by the agent for `meshd tunnel take` on the hub.

import (
	"fmt"
	"strings"

	"meshd/api"
	"meshd/catalogue"
	"meshd/fsm"
	"meshd/host/tunnel"
	"meshd/report"
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

// TunnelPreview is what a takeover of the found interface iface will raise beside what iface is
// now, field by field (wg.Preview): what genesis --take-tunnel, join --tunnel and their
// --dry-run list before anything stops, so the operator sees the same interface on both sides.
// A preshared key shows only as set or none; the private key never.
func TunnelPreview(iface string) ([]report.TunnelField, error) {
	f, err := wg.Discover(iface, "")
	if err != nil {
		return nil, fmt.Errorf("reading the tunnel to take over: %w", err)
	}
	return tunnel.Fields(wg.Preview(f)), nil
}

// Uncarried refuses a takeover of iface whose preview differs: a field meshd would not carry.
// nil when every field is the same, or when iface cannot be read (its own checks say why).
func Uncarried(iface string) error {
	fields, err := TunnelPreview(iface)
	if err != nil {
		return nil
	}
	var lost []string
	for _, f := range fields {
		if !f.Same && !f.Added {
			lost = append(lost, fmt.Sprintf("%s (found %s, the mesh would raise %s)", f.Field, f.Found, f.Mesh))
		}
	}
	if lost == nil {
		return nil
	}
	return fmt.Errorf("the takeover of %s would not carry: %s; nothing was stopped", iface, strings.Join(lost, "; "))
}

// previewFindings is Uncarried as the preflight's finding.
func previewFindings(iface string) []api.Finding {
	if err := Uncarried(iface); err != nil {
		return []api.Finding{{Check: "tunnel.carry", Level: api.LevelError, Message: err.Error()}}
	}
	return nil
}
