// Package nft is the driver for a found plain nftables ruleset: a rule carrying a meshd mark at
// the head of every found filter chain at the input hook (incoming) or the forward hook
// (forwarded), every change of a pass in one netlink transaction. It also reads the ruleset
// (ReadView), telling the found tables from meshd's, Docker's and iptables-nft's, detects it
// (Detect), and retires and restores its tables at the flip (Retire, Restore).
//
// It speaks nftables alone: whether Docker's DOCKER-USER chain is there too is read from
// iptables, by netfilter/firewall.
package nft
