package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The kernel's neighbour table (ARP, and NDP for IPv6) holds every namespace's entries together:
// N machines on one switch that all talk to each other need about N² of them. Past gc_thresh3
// (1024 by default, about 32 machines) the kernel refuses new entries and drops packets with
// "neighbor table overflow": a fleet lab's gossip would see members fail that are alive. The lab
// raises the three thresholds before it raises its machines, never lowers them, and says so.

// neighDirs are the thresholds' directories, IPv4's and IPv6's.
var neighDirs = []string{"/proc/sys/net/ipv4/neigh/default", "/proc/sys/net/ipv6/neigh/default"}

// neighThresholds are gc_thresh1, 2 and 3 for machines on one switch that also talk to hosts
// more addresses (Scenario.Hosts): N² + N·hosts entries fit under gc_thresh1 (no collection at
// all), with room to twice and four times that, and never less than cur.
func neighThresholds(machines, hosts int, cur [3]int) [3]int {
	n := machines*machines + machines*hosts
	want := [3]int{n, 2 * n, 4 * n}
	for i := range want {
		want[i] = max(want[i], cur[i])
	}
	return want
}

// raiseNeighbourTable raises the thresholds under dir for machines and hosts; it returns what it
// changed ("" when nothing had to).
func raiseNeighbourTable(dir string, machines, hosts int) (string, error) {
	var cur [3]int
	for i := range cur {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("gc_thresh%d", i+1)))
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil // no such table here (IPv6 off): nothing to hold
		}
		if err != nil {
			return "", err
		}
		if cur[i], err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return "", fmt.Errorf("%s gc_thresh%d: %w", dir, i+1, err)
		}
	}
	want := neighThresholds(machines, hosts, cur)
	var said []string
	// The third first: the kernel keeps thresh1 ≤ thresh2 ≤ thresh3 only by convention, but a
	// reader in between should never see a lower ceiling than a floor.
	for i := 2; i >= 0; i-- {
		if want[i] == cur[i] {
			continue
		}
		f := filepath.Join(dir, fmt.Sprintf("gc_thresh%d", i+1))
		if err := os.WriteFile(f, []byte(strconv.Itoa(want[i])), 0o644); err != nil {
			return "", err
		}
		said = append(said, fmt.Sprintf("gc_thresh%d %d→%d", i+1, cur[i], want[i]))
	}
	return strings.Join(said, ", "), nil
}
