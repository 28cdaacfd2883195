package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/catalogue"
	"meshd/fsm"
)

// Realistic tables, each one table (after any blank line): long node names, many modules.
func columnTables() map[string]func(io.Writer) {
	board := longBoard()
	board.Rows = append(board.Rows, api.BoardRow{Node: "postgres-replica-us-east-2b", Mode: fsm.Adopted, Next: "prepared mesh",
		Blocking: []string{"no host report yet"}, Steps: []api.BoardStep{{Name: "enrolled", Done: true}, {Name: "adopted"}}})
	var nodes []api.NodeSummary
	for i, name := range []string{"hub", "registry-eu-west-1", "postgres-replica-us-east-2b", "web1", "ci-runner-arm64-large-07"} {
		nodes = append(nodes, api.NodeSummary{Name: name, Mode: fsm.Adopted, Server: i < 3, ControlNode: i == 0, Address: fmt.Sprintf("10.99.0.%d", 10+i),
			Liveness: "alive", ReportFrom: "gossip", HeldFiles: 12 * i, HeldContainers: i, Assigned: 3 + i, Taken: i})
	}
	var mods []api.ModuleView
	for i, name := range []string{"mesh", "webapp-frontend", "registry", "postgres-primary", "postgres-replica", "monitoring-agent",
		"node-exporter", "log-shipper", "backup-restic", "ci-runner", "dns-cache", "ntp"} {
		m := api.ModuleView{Module: &catalogue.Module{Name: name, Foundation: i == 0,
			Description: "what " + name + " declares: its files under /etc/" + name + ", its containers and the openings it asks for"}}
		m.AssignedTo = []string{"hub", "registry-eu-west-1", "postgres-replica-us-east-2b"}[:1+i%3]
		m.TakenOn = m.AssignedTo[:i%2]
		mods = append(mods, m)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var events []fsm.Event
	for i, node := range []string{"registry-eu-west-1", "", "postgres-replica-us-east-2b"} {
		events = append(events, fsm.Event{Index: uint64(1000 + i), At: now, Node: node, By: "operator alice",
			What: "take webapp-frontend: its held file /etc/webapp-frontend/nginx/sites-enabled/default.conf was changed by something else"})
	}
	var peers []api.TunnelPeer
	for i := range 3 {
		peers = append(peers, api.TunnelPeer{PublicKey: fmt.Sprintf("kX9w3Qm7Rt2LpB8vNc4ZsYe1UaHdGfJo6Ki5%dPqWxE=", i), Address: fmt.Sprintf("10.99.0.%d/32", 20+i),
			Enrolled: i > 0, Node: "postgres-replica-us-east-2b", Endpoint: "[2001:db8:1234:5678::17]:51820", LastHeard: now.Add(-90 * time.Second),
			ReceiveBytes: 123456789, TransmitBytes: 987654})
	}
	return map[string]func(io.Writer){
		"board":       func(w io.Writer) { writeBoard(w, board) },
		"module list": func(w io.Writer) { writeModules(w, mods) },
		"status nodes": func(w io.Writer) {
			var b bytes.Buffer // writeStatus's node table alone
			writeStatus(&b, api.StatusView{Nodes: nodes})
			table := b.String()[strings.Index(b.String(), "NODE\t"):]
			io.WriteString(w, table[:strings.Index(table, "\n\n")+1])
		},
		"history":      func(w io.Writer) { writeHistory(w, api.HistoryView{Events: events}) },
		"tunnel peers": func(w io.Writer) { printTunnelPeers(w, peers, now) },
	}
}

// Issue 36: rows fitted one at a time left columns misaligned (a row whose last cells wrapped
// beside one whose did not). At 80, 120 and 160 columns, and piped, every cell of every row
// starts at its column's offset (the header's), stays inside its column, and says all it said;
// a table whose tokens cannot fit its columns is written as records, each cell under its header.
func TestTableColumnsAlign(t *testing.T) {
	for name, text := range columnTables() {
		var raw bytes.Buffer
		text(&raw)
		for _, width := range []int{80, 120, 160, 0} {
			out := rendered(t, width, text)
			if width > 0 && widest(out) > width {
				t.Errorf("%s at %d columns: a line of %d:\n%s", name, width, widest(out), out)
			}
			check := checkColumns
			if !aligned(raw.String(), out) {
				check = checkRecords
			}
			if err := check(raw.String(), out); err != nil {
				t.Errorf("%s at %d columns: %v:\n%s", name, width, err, out)
			}
		}
	}
}

// checkRecords checks that out writes raw (one table under a header) a row at a time: each of a
// row's cells, in turn, after its header.
func checkRecords(raw, out string) error {
	lines := tableLines(raw)
	head := strings.Split(lines[0], "\t")
	rest := nospace(out)
	for _, l := range lines[1:] {
		cells := strings.Split(l, "\t")
		for j, c := range cells {
			want := nospace(strings.ToLower(head[j]) + ":" + c)
			if j == len(cells)-1 && len(cells) < len(head) {
				want = nospace(c) // a note under a row
			}
			if strings.TrimSpace(c) == "" {
				continue
			}
			i := strings.Index(rest, want)
			if i < 0 {
				return fmt.Errorf("cell %q not written after its header %q, in turn", c, head[j])
			}
			rest = rest[i+len(want):]
		}
	}
	return nil
}

// checkColumns checks that out lays out raw (one table, each row's first cell not empty): each
// column's offset is where its header begins; every row's cells, read back from their columns
// over the row's lines, are the cells of raw; and nothing spills into the gap between columns.
func checkColumns(raw, out string) error {
	var rows [][]string
	for _, l := range strings.Split(raw, "\n") {
		if l != "" {
			rows = append(rows, strings.Split(l, "\t"))
		}
	}
	var lines [][]rune
	for _, l := range strings.Split(out, "\n") {
		if l != "" {
			lines = append(lines, []rune(l))
		}
	}
	header, n := string(lines[0]), len(rows[0])
	offs := make([]int, n)
	for j := 1; j < n; j++ {
		first := strings.Fields(rows[0][j])[0]
		i := strings.Index(header[offs[j-1]+1:], first)
		if i < 0 {
			return fmt.Errorf("header %q not on its first line", rows[0][j])
		}
		offs[j] = offs[j-1] + 1 + i
	}
	region := func(l []rune, from, to int) string {
		from, to = min(from, len(l)), min(to, len(l))
		return strings.TrimRight(string(l[from:to]), " ")
	}
	next := 0
	for _, row := range rows {
		// The row's lines: until its first cell is read whole, then while the first column is blank.
		var own [][]rune
		first := ""
		for next < len(lines) {
			col0 := region(lines[next], 0, offs[1]-gap)
			if len(own) > 0 && nospace(first) == nospace(row[0]) && strings.TrimSpace(col0) != "" {
				break
			}
			first += col0
			own = append(own, lines[next])
			next++
		}
		for j, cell := range row {
			end := 1 << 20
			if j < len(row)-1 {
				end = offs[j+1] - gap
			}
			got := ""
			for k, l := range own {
				part := region(l, offs[j], end)
				if j < len(row)-1 && strings.TrimSpace(region(l, end, offs[j+1])) != "" {
					return fmt.Errorf("row %q: text in the gap after column %d: %q", row[0], j, string(l))
				}
				if k == 0 && strings.TrimSpace(cell) != "" && len(part)-len(strings.TrimLeft(part, " ")) != len(cell)-len(strings.TrimLeft(cell, " ")) {
					return fmt.Errorf("row %q: cell %q does not start at column %d's offset %d", row[0], cell, j, offs[j])
				}
				got += part
			}
			if nospace(got) != nospace(cell) {
				return fmt.Errorf("row %q column %d: read back %q, wrote %q", row[0], j, got, cell)
			}
		}
	}
	if next != len(lines) {
		return fmt.Errorf("%d lines left after the last row", len(lines)-next)
	}
	return nil
}

func nospace(s string) string { return strings.Join(strings.Fields(s), "") }

// tableLines are raw's lines holding tabs: its table.
func tableLines(raw string) []string {
	var out []string
	for _, l := range strings.Split(raw, "\n") {
		if strings.Contains(l, "\t") {
			out = append(out, l)
		}
	}
	return out
}

// aligned says whether out begins raw's table in columns: its header's first two cells on one
// line.
func aligned(raw, out string) bool {
	head := strings.Split(tableLines(raw)[0], "\t")
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, head[0]) {
			return strings.Contains(l, strings.Fields(head[1])[0])
		}
	}
	return false
}
