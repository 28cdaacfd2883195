// Package reach answers, for a port a container publishes, who outside the machine reaches it
// through the machine's found firewall: anywhere, a list of source prefixes, or nobody. It is
// what `meshd module draft` asks before it writes an opening, so a drafted opening never lets in
// more than the found firewall does.
//
// It follows the path a new connection from outside takes, in each address family: Docker's
// DNAT of the published port (nat table), then every filter chain at the forward hook (the
// iptables FORWARD chain with DOCKER-USER and ufw's chains, iptables-legacy's too, and each
// found nftables base chain); a port Docker does not DNAT in a family is its proxy's, a process
// of the machine, and takes the input hook instead. A packet passes a hook only when every base
// chain there accepts it, so the answer is the intersection of what each accepts.
//
// The rules are read with package xt (iptables-save, both backends, both families) and
// `nft -j list ruleset` (the found tables only: meshd's, Docker's and iptables-nft's are skipped,
// the last read through iptables-save), then answered by pure functions over the parsed rules.
// meshd's own marked rules are skipped: the answer is the found firewall's.
//
// An answer is never a guess. A rule the packet may meet whose match is not understood
// (conntrack marks, ipsets, string matches, an interface that is neither loopback nor a
// container bridge, an address of the machine's own) is a refusal naming the rule. A match on
// what the client chooses (its source port) or on a rate counts as met where it lets the packet
// in and as unmet where it would stop it.
package reach
