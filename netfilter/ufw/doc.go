// Package ufw is the driver for a found ufw. It converges openings in ufw's own terms (`ufw
// allow`, `ufw route allow`, each with a meshd comment): in one edit of ufw's rules files under
// ufw's own lock where meshd sees them, else one ufw command per rule. It also reads ufw's rules
// files, detects ufw (Detect) and disables and enables it at the flip (Retire, Restore).
//
// What ufw cannot say (a forwarded opening at the head of DOCKER-USER, the routed opening at the
// head of FORWARD) goes into ufw's iptables backend through package xt: ufw lives in iptables,
// so ufw imports xt and never the other way round.
package ufw
