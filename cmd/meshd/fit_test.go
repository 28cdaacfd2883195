package main

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
	"unicode"

	"meshd/api"
	"meshd/fsm"
	"meshd/report"
)

// A board row with many modules and a long reason in the way, as on a real migration.
func longBoard() api.Board {
	row := api.BoardRow{Node: "registry-eu-west-1", Mode: fsm.Adopted, Next: "taken webapp-frontend", AdoptedFor: 36 * time.Hour,
		Blocking: []string{"held file /etc/webapp-frontend/nginx/sites-enabled/default.conf (webapp-frontend) changed by something else since it was found"}}
	row.Steps = []api.BoardStep{{Name: "enrolled", Done: true}, {Name: "adopted", Done: true}, {Name: "tunnel taken", Done: true}}
	for _, m := range []string{"mesh", "webapp-frontend", "registry", "postgres-primary", "monitoring-agent"} {
		row.Steps = append(row.Steps, api.BoardStep{Name: "prepared " + m, Done: true}, api.BoardStep{Name: "taken " + m})
	}
	row.Steps = append(row.Steps, api.BoardStep{Name: "converged"})
	return api.Board{Summary: "0 of 2 nodes converged; 3 of 11 modules taken", Rows: []api.BoardRow{row, {Node: "hub", Next: "converged"}}}
}

// A converge preview whose retire row's firewall description is long.
func longPreview() report.ConvergePreview {
	pv := report.ConvergePreview{Node: "registry-eu-west-1", Mode: fsm.Adopted, ReportAt: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC),
		Take: []string{"webapp-frontend", "registry"}, Filter: "table inet meshd_filter {\n\tchain input {\n\t}\n}", WillClose: 1, Token: "3f2a9c0d1e4b",
		Firewall: report.PreviewFirewall{Kind: "ufw", Description: "ufw, active, 42 rules in /etc/ufw/user.rules and /etc/ufw/user6.rules, default deny incoming, allow outgoing",
			Retire: "ufw disable (its rules stay on disk; meshd adopt enables them again)"}}
	pv.Listeners = []report.PreviewListener{
		{Listener: report.Listener{Proto: "tcp", Addr: netip.MustParseAddr("0.0.0.0"), Port: 5000, PID: 812, Process: "docker-proxy"},
			Verdict: report.Verdict{Mark: report.MarkDeclared, Module: "registry", Opening: "5000/tcp incoming from the private network only"}},
		{Listener: report.Listener{Proto: "tcp", Addr: netip.MustParseAddr("::"), Port: 9100, PID: 77, Process: "node_exporter"},
			Verdict: report.Verdict{Mark: report.MarkWillClose}},
	}
	return pv
}

func rendered(t *testing.T, width int, text func(io.Writer)) string {
	t.Helper()
	var b bytes.Buffer
	if err := writeTable(&b, width, text); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func widest(s string) int {
	w := 0
	for _, l := range strings.Split(s, "\n") {
		w = max(w, runes(l))
	}
	return w
}

// Issue 36: board rows were 281 columns wide and preview lines 222 on an 80- or 120-column
// terminal. On a terminal every line fits its width, and says all it said; piped, or with
// --wide, each line is written whole, on one line.
func TestTablesFitTheTerminal(t *testing.T) {
	for name, text := range map[string]func(io.Writer){
		"board":   func(w io.Writer) { writeBoard(w, longBoard()) },
		"preview": func(w io.Writer) { writeConvergePreview(w, longPreview()) },
		"status": func(w io.Writer) {
			writeStatus(w, api.StatusView{Leader: api.LeaderView{Node: "hub", Address: "198.51.100.1:7947"}, Board: ptr(longBoard()),
				Nodes: []api.NodeSummary{{Name: "registry-eu-west-1", Mode: fsm.Adopted, Address: "10.99.0.17", Liveness: "alive", ReportFrom: "gossip", HeldFiles: 12, HeldContainers: 3}}})
		},
	} {
		whole := rendered(t, 0, text)
		var raw bytes.Buffer
		text(&raw)
		wl, rl := strings.Split(whole, "\n"), strings.Split(raw.String(), "\n")
		if len(wl) != len(rl) || widest(whole) <= 120 {
			t.Errorf("%s piped: not the whole lines (widest %d):\n%s", name, widest(whole), whole)
		}
		for i := range min(len(wl), len(rl)) {
			if strings.Join(strings.Fields(wl[i]), " ") != strings.Join(strings.Fields(rl[i]), " ") {
				t.Errorf("%s piped: line %q written as %q", name, rl[i], wl[i])
			}
		}
		for _, width := range []int{80, 120} {
			fitted := rendered(t, width, text)
			if widest(fitted) > width {
				t.Errorf("%s at %d columns: a line of %d:\n%s", name, width, widest(fitted), fitted)
			}
			if err := saysAll(raw.String(), fitted); err != nil {
				t.Errorf("%s at %d columns: %v:\n%s\nwhole:\n%s", name, width, err, fitted, whole)
			}
		}
	}
	if fitted := rendered(t, 80, func(w io.Writer) { writeBoard(w, longBoard()) }); testing.Verbose() {
		t.Logf("the board at 80 columns:\n%s", fitted)
	}
}

func ptr[T any](v T) *T { return &v }

// Piped (no terminal), output is whole whatever COLUMNS says; --wide keeps a terminal's whole too.
func TestWidthIsWholeWhenPipedOrWide(t *testing.T) {
	t.Setenv("COLUMNS", "80")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, g := range []*globals{{out: w}, {out: &bytes.Buffer{}}, {out: os.Stdout, wide: true}} {
		if n := g.width(); n != 0 {
			t.Errorf("width for %T (wide %v): %d", g.out, g.wide, n)
		}
	}
}

// saysAll checks that out holds every letter of raw, whatever its lines (in columns,
// TestTableColumnsAlign checks each cell's place), and adds only headers' labels ("node:") to
// the tables it writes as records.
func saysAll(raw, out string) error {
	count := map[rune]int{}
	for _, r := range strings.ToLower(nospace(out)) {
		count[r]++
	}
	for _, r := range strings.ToLower(nospace(raw)) {
		if count[r]--; count[r] < 0 {
			return fmt.Errorf("%q written fewer times than said", r)
		}
	}
	for r, n := range count {
		if n > 0 && !unicode.IsLower(r) && r != ':' {
			return fmt.Errorf("%q written more often than said", r)
		}
	}
	return nil
}
