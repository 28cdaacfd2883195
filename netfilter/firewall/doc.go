// Package firewall is the found firewall as a whole: which kind is found (Detect; a kind meshd
// does not speak is refused, naming it), a cheap stamp of what that answer depends on (Stamp),
// the driver of that kind (NewDriver), and retiring and restoring it at the flip (Retire,
// Restore). Each kind's work is its own package's (ufw, nft, xt).
//
// It sits above the drivers so the imports run one way: the drivers import netfilter's shared
// words, this package imports the drivers. Detect reads every kind before it decides, since
// kinds are layered: ufw and Docker live in iptables, which iptables-nft keeps in nftables. So
// ufw is looked for first, and an nftables ruleset beside iptables rules of their own is two
// firewalls, refused.
package firewall
