package openings

import (
	"fmt"
	"net/netip"
	"sort"
	"time"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/netfilter"
)

// desiredOpenings is what the last declaration asks of the packet filter.
type desiredOpenings struct {
	mode     fsm.Mode
	entries  []entry
	openings []netfilter.Opening // the valid ones, for the found firewall
	priv     netfilter.Private
	privNote string
	guard    netfilter.GuardSpec
	filter   netfilter.FilterSpec
	key      string
}

type entry struct {
	res     fsm.Resource
	o       netfilter.Opening
	mark    string
	invalid string
}

type memory struct {
	state      string
	since      time.Time
	restoredAt time.Time
	reason     string
	through    string
}

type tableMemory struct {
	loaded     bool
	failed     string
	since      time.Time
	restoredAt time.Time
}

// compose turns the declaration into what the packet filter must carry.
func (d *Driver) compose(decl *fsm.Declaration, rs []fsm.Resource) *desiredOpenings {
	w := &desiredOpenings{mode: fsm.Adopted}
	if decl != nil {
		w.mode = decl.Mode
	}
	// The private network's interface is the one the declaration raises, whatever its name;
	// the configured one (MeshInterface) where it declares none.
	iface := d.iface
	if decl != nil && decl.Tunnel.Interface != "" {
		iface = decl.Tunnel.Interface
	}
	w.priv = netfilter.Private{Interface: iface}
	w.privNote = iface
	if decl != nil && decl.Tunnel.Range != "" {
		if p, err := netip.ParsePrefix(decl.Tunnel.Range); err == nil {
			w.priv.Range = p.Masked()
			w.privNote += " " + w.priv.Range.String()
		} else {
			w.privNote += fmt.Sprintf(" (range %q unreadable: %v)", decl.Tunnel.Range, err)
		}
	}
	seenPort := map[netfilter.Port]bool{}
	var filterAdmit map[netfilter.Port][]netip.Addr
	for _, r := range rs {
		e := entry{res: r}
		if r.Opening == nil {
			e.invalid = "opening resource without an opening"
			w.entries = append(w.entries, e)
			continue
		}
		e.o = netfilter.Opening{Module: r.Module, Proto: r.Opening.Proto, Port: r.Opening.Port,
			From: r.Opening.From, Path: r.Opening.Path}
		if err := e.o.Validate(); err != nil {
			e.invalid = err.Error()
		} else {
			e.mark = e.o.Mark()
			w.openings = append(w.openings, e.o)
			// The derived filter admits the servers alone to such a port, as the guard does: on a
			// converged server nothing else stands between the Raft port and anywhere.
			if p := (netfilter.Port{Proto: e.o.Proto, Port: e.o.Port}); r.Opening.Admit == catalogue.AdmitServers {
				if filterAdmit == nil {
					filterAdmit = map[netfilter.Port][]netip.Addr{}
				}
				if _, done := filterAdmit[p]; !done {
					filterAdmit[p] = nil // named even when no server reads as an address: nobody is admitted then
					filterAdmit = admitServers(filterAdmit, p, decl)
				}
			}
			if p := (netfilter.Port{Proto: e.o.Proto, Port: e.o.Port}); r.Opening.Guarded && !seenPort[p] {
				seenPort[p] = true
				w.guard.Ports = append(w.guard.Ports, p)
				if r.Opening.Admit == catalogue.AdmitServers {
					w.guard.Admit = admitServers(w.guard.Admit, p, decl)
				}
			}
		}
		w.entries = append(w.entries, e)
	}
	sort.Slice(w.guard.Ports, func(i, j int) bool {
		a, b := w.guard.Ports[i], w.guard.Ports[j]
		return a.Proto < b.Proto || a.Proto == b.Proto && a.Port < b.Port
	})
	w.guard.Private, w.guard.Trusted = w.priv, d.trusted
	w.filter = netfilter.FilterSpec{Private: w.priv, MeshPorts: meshPorts(decl), Openings: w.openings, ForwardFrom: d.forwardFrom, Admit: filterAdmit}
	w.key = fmt.Sprintf("%s|%v|%v|%v", w.mode, w.openings, w.guard, w.filter)
	return w
}

// admitServers adds the declaration's servers' underlay addresses to the guard's admitted
// sources for port p. The record checked them at enrolment; one that does not read as an address
// is left out (the guard then refuses it, as it refuses everyone off the private network).
func admitServers(admit map[netfilter.Port][]netip.Addr, p netfilter.Port, decl *fsm.Declaration) map[netfilter.Port][]netip.Addr {
	if decl == nil {
		return admit
	}
	if admit == nil {
		admit = map[netfilter.Port][]netip.Addr{}
	}
	for _, s := range decl.Servers {
		if a, err := netip.ParseAddr(s); err == nil {
			admit[p] = append(admit[p], a.Unmap())
		}
	}
	return admit
}

// meshPorts are the mesh's own ports (bus, raft, gossip) as the declaration carries them (fsm
// fills in the catalogue's defaults; the host reads no catalogue).
func meshPorts(decl *fsm.Declaration) []netfilter.Port {
	if decl == nil {
		return nil
	}
	var out []netfilter.Port
	for _, p := range []uint16{decl.Mesh.Bus, decl.Mesh.Raft, decl.Mesh.Gossip} {
		if p != 0 {
			out = append(out, netfilter.Port{Proto: "tcp", Port: p})
		}
	}
	if p := decl.Mesh.Gossip; p != 0 {
		out = append(out, netfilter.Port{Proto: "udp", Port: p})
	}
	return out
}

// FilterText is the derived filter d's node loads once converged, composed as the
// opening driver composes it (with its defaults: the declaration's interface, else
// MeshInterface; DefaultForwardFrom).
func FilterText(d *fsm.Declaration) (string, string) {
	var rs []fsm.Resource
	for _, r := range d.Resources {
		if r.Kind == fsm.KindOpening {
			rs = append(rs, r)
		}
	}
	w := newDriver(Config{}, nil).compose(d, rs)
	text, err := netfilter.FilterText(w.filter)
	if err != nil {
		return "", fmt.Sprintf("the derived filter cannot be composed: %v", err)
	}
	return text, ""
}
