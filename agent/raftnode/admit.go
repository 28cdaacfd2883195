package raftnode

// Who reaches Raft: a server certificate of the mesh CA is not enough (a removed server keeps
// one, and whoever holds a leaked CA key can mint one), so the record decides. A peer is
// admitted when its certificate's key is one of the record's current servers' keys.

import (
	"crypto/ed25519"
	"crypto/x509"
	"fmt"
	"net/netip"
	"time"

	"meshd/fsm"
	"meshd/pki"
)

// recordGuard is the Guard of a server's Raft: the record's servers, as this server's record
// holds them now.
type recordGuard struct {
	f *fsm.FSM
	// behind says this server's record may not know every current server yet (see
	// Node.behind); then a certificate for a node the record does not hold at all is admitted,
	// so the server that leads can bring the record up to date.
	behind func() bool
}

// Server says addr is one of the record's servers' addresses, on the underlay or the private
// network.
func (g *recordGuard) Server(addr netip.Addr) bool {
	found := false
	g.f.Read(func(r *fsm.Record, _ uint64) {
		for _, n := range r.Nodes {
			if n.Server && (sameAddr(n.Advertise, addr) || sameAddr(n.Address, addr)) {
				found = true
				return
			}
		}
	})
	return found
}

// sameAddr says a, an address or an address with its prefix length as the record writes them,
// is addr.
func sameAddr(a string, addr netip.Addr) bool {
	if p, err := netip.ParsePrefix(a); err == nil {
		return p.Addr().Unmap() == addr
	}
	if p, err := netip.ParseAddr(a); err == nil {
		return p.Unmap() == addr
	}
	return false
}

// Admit refuses a certificate whose key is not one of the record's current servers' keys,
// saying which node it names and why. While the record is behind (a joining server's is empty,
// a restarted one's replays its log), a node the record does not hold at all is let in.
func (g *recordGuard) Admit(cert *x509.Certificate) error {
	name, err := pki.NodeName(cert)
	if err != nil {
		return err
	}
	key, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok {
		return fmt.Errorf("the certificate of node %s has no ed25519 key", name)
	}
	pub := pki.PublicKeyString(key)
	var refusal error
	unknown, servers := false, 0
	g.f.Read(func(r *fsm.Record, _ uint64) {
		unknown, refusal = admitIn(r, name, pub)
		for _, n := range r.Nodes {
			if n.Server {
				servers++
			}
		}
	})
	if !unknown {
		return refusal
	}
	if servers == 0 || g.behind() {
		return nil
	}
	return refusal
}

// admitIn is Admit's rule against record r for a certificate naming node name with key pub:
// whether r holds neither the key nor the name (a node it may not know yet), and nil when pub is a
// current server's key, otherwise why not.
func admitIn(r *fsm.Record, name, pub string) (bool, error) {
	for _, v := range r.Revoked {
		if v.PublicKey == pub {
			return false, fmt.Errorf("the certificate of node %s is revoked: node %s was removed at %s", name, v.Node,
				v.At.Format(time.RFC3339))
		}
	}
	for _, n := range r.Nodes {
		if n.PublicKey != pub {
			continue
		}
		switch {
		case !n.Server:
			return false, fmt.Errorf("node %s is not a server in the record (a client, or a server taken out of the group): "+
				"only the record's servers reach Raft", n.Name)
		case n.Name != name:
			return false, fmt.Errorf("the certificate names node %s but its key is server %s's", name, n.Name)
		}
		return false, nil
	}
	if n := r.Nodes[name]; n != nil {
		return false, fmt.Errorf("the certificate of node %s is not for the key the record holds for it: "+
			"only the record's servers reach Raft, with the keys they enrolled", name)
	}
	return true, fmt.Errorf("node %s is not in the record: only the record's servers reach Raft", name)
}
