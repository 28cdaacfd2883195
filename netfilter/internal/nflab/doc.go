// Package nflab is the lab the netfilter packages' root tests share: network namespaces for a
// host, an outside machine, a peer on the private network and a container, the host's firewall
// configuration in a mount namespace of its own, and the found firewalls those tests start from.
//
// It is apart from the tests because the shared words (netfilter) and each driver (ufw, nft,
// xt) test on the same lab, and a test file cannot be imported.
package nflab
