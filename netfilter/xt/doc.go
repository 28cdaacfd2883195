// Package xt is the driver for a found plain-iptables firewall, in iptables and ip6tables alike
// and over either backend (iptables-nft, iptables-legacy). It reads a filter table as
// iptables-save prints it (Read), converges meshd's marked rules at the head of one family's
// chains in one iptables-restore --noflush (Converge), detects the firewall (Detect), and
// retires and restores its own rules at the flip (Retire, Restore).
//
// ufw's driver writes its DOCKER-USER and FORWARD rules through Read and Converge too: ufw lives
// in iptables, and this package is the one place meshd speaks iptables-save's lines.
package xt
