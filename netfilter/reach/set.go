package reach

import (
	"net/netip"
	"slices"
)

// set is a set of source addresses of one family, as disjoint prefixes.
type set []netip.Prefix

func all(v6 bool) set {
	if v6 {
		return set{netip.MustParsePrefix("::/0")}
	}
	return set{netip.MustParsePrefix("0.0.0.0/0")}
}

// within says whether a lies inside b.
func within(a, b netip.Prefix) bool { return a.Bits() >= b.Bits() && b.Contains(a.Addr()) }

// and is s ∩ q.
func (s set) and(q netip.Prefix) set {
	var out set
	for _, p := range s {
		switch {
		case within(p, q):
			out = append(out, p)
		case within(q, p):
			out = append(out, q)
		}
	}
	return out
}

// minus is s \ q.
func (s set) minus(q netip.Prefix) set {
	var out set
	for _, p := range s {
		switch {
		case within(p, q):
		case within(q, p):
			out = append(out, split(p, q)...)
		default:
			out = append(out, p)
		}
	}
	return out
}

// split is p \ q for q inside p: one prefix for each bit from p's length to q's, the half q is
// not in.
func split(p, q netip.Prefix) set {
	var out set
	for bits := p.Bits() + 1; bits <= q.Bits(); bits++ {
		half, _ := q.Addr().Prefix(bits)
		out = append(out, sibling(half))
	}
	return out
}

// sibling is the other half of the prefix one bit shorter than p.
func sibling(p netip.Prefix) netip.Prefix {
	b := p.Addr().AsSlice()
	i := p.Bits() - 1
	b[i/8] ^= 0x80 >> (i % 8)
	a, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(a, p.Bits())
}

// inAny is s ∩ (q1 ∪ q2 ∪ ...); notIn is s minus all of them.
func (s set) inAny(qs []netip.Prefix) set {
	var out set
	for _, q := range qs {
		out = out.or(s.and(q))
	}
	return out
}

func (s set) notIn(qs []netip.Prefix) set {
	for _, q := range qs {
		s = s.minus(q)
	}
	return s
}

// or is s ∪ t, kept disjoint and merged where two halves make a whole.
func (s set) or(t set) set {
	out := slices.Clone(s)
	for _, q := range t {
		out = append(out.minus(q), q)
	}
	return out.merged()
}

// merged sorts s and joins sibling halves.
func (s set) merged() set {
	for {
		slices.SortFunc(s, func(a, b netip.Prefix) int {
			if c := a.Addr().Compare(b.Addr()); c != 0 {
				return c
			}
			return a.Bits() - b.Bits()
		})
		joined := false
		for i := 0; i+1 < len(s); i++ {
			if s[i].Bits() == s[i+1].Bits() && s[i].Bits() > 0 && sibling(s[i]) == s[i+1] {
				s[i] = netip.PrefixFrom(s[i].Addr(), s[i].Bits()-1).Masked()
				s = slices.Delete(s, i+1, i+2)
				joined = true
			}
		}
		if !joined {
			return s
		}
	}
}

// full says whether s is every address of its family.
func (s set) full() bool { return len(s) == 1 && s[0].Bits() == 0 }
