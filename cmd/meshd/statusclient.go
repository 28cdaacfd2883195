package main

import (
	"fmt"
	"io"
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
	answered := "none answered yet"
	if cs.Answered != "" {
		answered = fmt.Sprintf("%s answered last, %s ago", cs.Answered, now.Sub(cs.AnsweredAt).Round(time.Second))
	}
	fmt.Fprintf(w, "servers: %s\t%s\n", strings.Join(cs.Servers, ", "), answered)
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
