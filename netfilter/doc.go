// Package netfilter owns every word meshd speaks to the kernel's packet filter: chains, tables,
// rules, ufw and iptables. Nothing outside it knows what a chain is.
//
// A node in use is adopted before it is converged (ADR 0100), so the firewall found on the
// machine stays in force and meshd must speak it in its own terms instead of loading a table
// of its own: an accept in meshd's own table would not help, because a drop in the found
// firewall's chain at the same hook is final. This package therefore:
//
//   - detects the found firewall (Detect): ufw over iptables-nft or iptables-legacy, a plain
//     nftables ruleset, plain iptables, or none; a kind it does not speak (firewalld, or a
//     ruleset it cannot read) is an error naming it, so adoption refuses;
//   - converges openings through it (Driver): one declarative call, "make the set of
//     meshd-marked rules equal to this desired set". Every driver (ufw, nftables, iptables)
//     reads the rules meshd marked, decides with one shared pure diff (plan) what to add and
//     what to remove (every copy past the first of a marked rule included), applies both in
//     one batch (ufw, which has none, one command per rule), re-reads and reports what the
//     re-read shows; nothing to change writes nothing. Every rule meshd adds carries a meshd
//     mark, and meshd removes only what it marked;
//   - notices a reload of the found firewall promptly (Watch) so the caller re-converges;
//   - loads meshd's own tables through github.com/google/nftables: the refuse-only guard on
//     adopted nodes (Guard), the drop-by-default derived filter and base ruleset on converged
//     nodes (LoadFilter, LoadBaseRuleset);
//   - retires and restores the found firewall at the flip (Retire, Restore), by disabling it,
//     never by flushing it.
//
// Everything runs in a given network namespace: netlink sockets are opened in Env.NetNS and
// commands (ufw, iptables, nft) go through Env.Runner, which the agent leaves as a plain exec
// and tests wrap with nsenter into namespaces they created.
package netfilter
