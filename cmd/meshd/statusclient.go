package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/report"
)

// writeClientStatus is status's text on a client's socket, which holds no record: the node and
// its declaration, the servers it follows, its gossip view, and where the whole record is read.
func writeClientStatus(w io.Writer, cs api.ClientStatus, now time.Time) {
	mode := string(cs.Mode)
	switch cs.Mode {
	case "":
		mode = "(no declaration from a server yet)"
	case fsm.Adopted:
		mode = "ADOPTED"
	}
	fmt.Fprintf(w, "node: %s (client)\tmode: %s\n", cs.Node, mode)
	if cs.Mode != "" {
		fmt.Fprintf(w, "declaration: record index %d\taddress: %s\n", cs.Index, report.OrDash(cs.Address))
		fmt.Fprintf(w, "assigned: %s\ttaken: %s\n", list(cs.Assigned), list(cs.Taken))
	}
	// Each server once, the one that answered last marked where it is listed.
	servers := make([]string, 0, len(cs.Servers))
	for _, s := range cs.Servers {
		if s == cs.Answered {
			s += fmt.Sprintf(" (answered last, %s ago)", now.Sub(cs.AnsweredAt).Round(time.Second))
		}
		servers = append(servers, s)
	}
	switch {
	case cs.Answered == "":
		servers = append(servers, "(none answered yet)")
	case !slices.Contains(cs.Servers, cs.Answered):
		servers = append(servers, fmt.Sprintf("%s, no longer followed, answered last, %s ago", cs.Answered, now.Sub(cs.AnsweredAt).Round(time.Second)))
	}
	fmt.Fprintf(w, "servers: %s\n", strings.Join(servers, ", "))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "MEMBER\tADDRESS\tSTATE")
	for _, m := range cs.Members {
		fmt.Fprintf(w, "%s\t%s\t%s\n", m.Name, m.Address, m.State)
	}
	if len(cs.Members) == 0 {
		fmt.Fprintln(w, "(gossip not started)\t\t")
	}
	fmt.Fprintf(w, "\n%s\n", cs.Record)
}
