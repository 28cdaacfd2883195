package host

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"meshd/report"
)

// Listeners reads every listening socket of the network namespace this process is in, with the
// process holding it where /proc says so.
func Listeners() ([]report.Listener, error) { return new(ListenerReader).Read() }

// ListenerReader reads the listening sockets pass after pass, remembering which process holds each
// socket: finding a holder means reading every process's file descriptors, so it is done only when
// a socket it has not seen yet listens. A pass where nothing new listens reads /proc/net alone.
type ListenerReader struct {
	owners map[string]owner // socket inode → holder; owner{} where /proc named none
}

// Read returns every listening socket now, sorted by port, protocol and address: over the
// kernel's socket diagnostics (diagListeners), or from /proc/net where those cannot be read.
func (r *ListenerReader) Read() ([]report.Listener, error) {
	out, inodes, err := diagListeners()
	if err != nil {
		out, inodes, err = procListeners()
		if err != nil {
			return nil, err
		}
	}
	r.resolve(inodes)
	for i := range out {
		o := r.owners[inodes[i]]
		out[i].PID, out[i].Process = o.pid, o.comm
	}
	sortListeners(out)
	return out, nil
}

// procListeners reads every listening socket from /proc/net's four tables, with beside each its
// inode.
func procListeners() ([]report.Listener, []string, error) {
	var out []report.Listener
	var inodes []string
	for _, src := range []struct{ file, proto string }{
		{"/proc/net/tcp", "tcp"}, {"/proc/net/tcp6", "tcp"}, {"/proc/net/udp", "udp"}, {"/proc/net/udp6", "udp"},
	} {
		ls, in, err := readProcNet(src.file, src.proto)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return nil, nil, err
		}
		out, inodes = append(out, ls...), append(inodes, in...)
	}
	return out, inodes, nil
}

// sortListeners sorts by port, protocol and address.
func sortListeners(out []report.Listener) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].Port != out[j].Port {
			return out[i].Port < out[j].Port
		}
		if out[i].Proto != out[j].Proto {
			return out[i].Proto < out[j].Proto
		}
		return out[i].Addr.Less(out[j].Addr)
	})
}

// resolve makes owners hold exactly the listening inodes, walking /proc for their holders only
// when one of them is new.
func (r *ListenerReader) resolve(inodes []string) {
	fresh := r.owners == nil
	for _, in := range inodes {
		if _, ok := r.owners[in]; !ok {
			fresh = true
		}
	}
	if !fresh {
		return
	}
	all := socketOwners()
	r.owners = make(map[string]owner, len(inodes))
	for _, in := range inodes {
		r.owners[in] = all[in]
	}
}

type owner struct {
	pid  int
	comm string
}

// socketOwners maps socket inodes to the process holding them.
func socketOwners() map[string]owner {
	out := map[string]owner{}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		link, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		inode := strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")
		if _, ok := out[inode]; ok {
			continue
		}
		pidDir := filepath.Dir(filepath.Dir(fd))
		pid, _ := strconv.Atoi(filepath.Base(pidDir))
		comm, _ := os.ReadFile(filepath.Join(pidDir, "comm"))
		out[inode] = owner{pid: pid, comm: strings.TrimSpace(string(comm))}
	}
	return out
}

// readProcNet reads the listening sockets of one /proc/net table, and beside each its inode.
func readProcNet(file, proto string) ([]report.Listener, []string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var out []report.Listener
	var inodes []string
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		local, remote, state, inode := fields[1], fields[2], fields[3], fields[9]
		if proto == "tcp" && state != "0A" { // LISTEN
			continue
		}
		if proto == "udp" && (state != "07" || !strings.HasSuffix(remote, ":0000")) {
			continue
		}
		addr, port, err := parseHexAddr(local)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, report.Listener{Proto: proto, Addr: addr, Port: port})
		inodes = append(inodes, inode)
	}
	return out, inodes, sc.Err()
}

// parseHexAddr reads /proc/net's "0100007F:1F90" (little-endian words) form.
func parseHexAddr(s string) (netip.Addr, uint16, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.Addr{}, 0, fmt.Errorf("address %q", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("port in %q", s)
	}
	raw, err := hex.DecodeString(h)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.Addr{}, 0, fmt.Errorf("address %q", s)
	}
	// Each 32-bit word is in host (little-endian) order.
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	addr, _ := netip.AddrFromSlice(raw)
	return addr.Unmap(), uint16(port), nil
}
