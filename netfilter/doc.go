// Package netfilter holds the words meshd's firewall packages share, and meshd's own tables.
// Nothing outside netfilter and the packages under it knows what a chain is.
//
// A node in use is adopted before it is converged (ADR 0100), so the firewall found on the
// machine stays in force and meshd must speak it in its own terms instead of loading a table
// of its own: an accept in meshd's own table would not help, because a drop in the found
// firewall's chain at the same hook is final. The work is split by firewall:
//
//   - netfilter/ufw, netfilter/nft and netfilter/xt hold one driver each (ufw, a plain
//     nftables ruleset, plain iptables): each reads, converges, detects and retires its kind;
//   - netfilter/firewall sits above them: which kind is found (Detect, Stamp), its driver
//     (NewDriver), retiring and restoring it at the flip (Retire, Restore);
//   - this package is what they all import: the openings, the found firewall, the report and
//     the Driver interface; the one pure diff every driver decides with (Plan) and a driver's
//     memory between calls (Base); where the firewall lives (Env, Runner) and meshd's own
//     netlink reads and writes of nftables rules.
//
// Every driver converges the same way: one declarative call, "make the set of meshd-marked
// rules equal to this desired set". It reads the rules meshd marked, decides with Plan what to
// add and what to remove (every copy past the first of a marked rule included), applies both in
// one batch (ufw, where it cannot, one command per rule), re-reads and reports what the re-read
// shows; nothing to change writes nothing. Every rule meshd adds carries a meshd mark, and
// meshd removes only what it marked.
//
// This package also:
//
//   - loads meshd's own tables through github.com/google/nftables: the refuse-only guard on
//     adopted nodes (Guard), the drop-by-default derived filter and base ruleset on converged
//     nodes (LoadFilter, LoadBaseRuleset), and keeps the last one for boot (KeepForBoot);
//   - notices a reload of the found firewall promptly (Watch) so the caller re-converges;
//   - keeps what a retirement took out (Retired), so a restore can put it back.
//
// Everything runs in a given network namespace: netlink sockets are opened in Env.NetNS and
// commands (ufw, iptables, nft) go through Env.Runner, which the agent leaves as a plain exec
// and tests wrap with nsenter into namespaces they created.
package netfilter
