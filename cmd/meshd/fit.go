package main

import (
	"bytes"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Tables are laid out whole, a column at a time (issue 36: board rows 281 columns wide on an 80-
// or 120-column terminal, and rows fitted alone left their columns misaligned). A table is a run
// of lines holding tabs; its columns are sized over all of its lines, so a column starts at the
// same offset on every line. On a terminal, a table wider than it has its widest columns narrowed
// (the narrow ones, and the first when it takes at most a third, keep their width; the last keeps
// a third) and each cell wrapped inside its own column: nothing is cut off. A line breaks only at
// a space, after a comma, or after a '/' of a path: never inside an address, a port, a name or a
// key, so no column is narrower than its longest such token. A table whose columns cannot all
// hold theirs is written a record at a time instead, one "header: value" line per cell (a table
// with no header: its cells on one line, wrapped), rather than in columns a few letters wide.
// Piped, or with --wide, every line is written whole, as scripts and grep read it.

// fallbackWidth is the width of a terminal that says none, with COLUMNS unset.
const fallbackWidth = 80

// gap is the spaces between two columns.
const gap = 2

// width is what the text output is fitted to: 0 (whole lines) with --wide or when stdout is no
// terminal; else the terminal's width, COLUMNS when the terminal says none.
func (g *globals) width() int {
	f, ok := g.out.(*os.File)
	if g.wide || !ok || !isTerminal(f) {
		return 0
	}
	if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
		return int(ws.Col)
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return fallbackWidth
}

// writeTable writes what text writes to w: lines holding tabs as tables (cells separated by
// tabs, columns aligned over the whole table), each table fitted to width columns; width 0
// writes the lines whole. A line's text after its last tab is its last cell: on a line with as
// many tabs as the table's fullest, the last column; on a shorter line it spans to the line's
// end (a note under a row), and so widens no column.
func writeTable(w io.Writer, width int, text func(w io.Writer)) error {
	var raw bytes.Buffer
	text(&raw)
	s := raw.String()
	nl := strings.HasSuffix(s, "\n")
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	var out []string
	for i := 0; i < len(lines); {
		if !strings.Contains(lines[i], "\t") {
			out = append(out, fitPlain(lines[i], width)...)
			i++
			continue
		}
		j := i
		var rows [][]string
		for ; j < len(lines) && strings.Contains(lines[j], "\t"); j++ {
			rows = append(rows, strings.Split(lines[j], "\t"))
		}
		out = append(out, layTable(rows, width)...)
		i = j
	}
	res := strings.Join(out, "\n")
	if nl && s != "" {
		res += "\n"
	}
	_, err := io.WriteString(w, res)
	return err
}

// layTable lays out one table's rows (each its cells; the last one after the last tab) as lines
// at most width wide (0: whole).
func layTable(rows [][]string, width int) []string {
	n := 0 // columns ended by a tab on some row; column n is the full rows' last cells
	for _, r := range rows {
		n = max(n, len(r)-1)
	}
	nat := make([]int, n+1)
	floor := make([]int, n+1)
	for _, r := range rows {
		for j, c := range r {
			if j < len(r)-1 || len(r)-1 == n {
				nat[j] = max(nat[j], runes(c))
				floor[j] = max(floor[j], longestToken(c))
			}
		}
	}
	cols := nat
	if width > 0 && !fits(rows, nat, width) {
		var ok bool
		if cols, ok = narrowTable(nat, floor, width-gap*n); !ok {
			return records(rows, width)
		}
	}
	offs := make([]int, n+1)
	for j := 1; j <= n; j++ {
		offs[j] = offs[j-1] + cols[j-1] + gap
	}
	for _, r := range rows { // a short row's last cell spans to the line's end: its tokens too
		if j := len(r) - 1; width > 0 && j < n && offs[j]+longestToken(r[j]) > width {
			return records(rows, width)
		}
	}
	var out []string
	for _, r := range rows {
		chunks := make([][]string, len(r))
		height := 1
		for j, c := range r {
			room := cols[j]
			if j == len(r)-1 && j < n {
				room = width - offs[j]
			}
			chunks[j] = wrapCell(c, room, width)
			height = max(height, len(chunks[j]))
		}
		for k := 0; k < height; k++ {
			var b strings.Builder
			at := 0
			for j := range r {
				if k >= len(chunks[j]) || chunks[j][k] == "" {
					continue
				}
				b.WriteString(strings.Repeat(" ", max(offs[j]-at, 0)))
				b.WriteString(chunks[j][k])
				at = max(offs[j], at) + runes(chunks[j][k])
			}
			out = append(out, strings.TrimRight(b.String(), " "))
		}
	}
	return out
}

// records is a table too narrow for its columns, a row at a time: under a header (a first row
// all in capitals), each row a block of "header: value" lines, blocks parted by a blank line;
// with none, each row's cells on one line. Every line is wrapped to width.
func records(rows [][]string, width int) []string {
	head := rows[0]
	if len(rows) == 1 { // a header alone, or one row: said as it is
		head = nil
	}
	for _, c := range head {
		if c != strings.ToUpper(c) || strings.ToLower(c) == c && c != "" {
			head = nil
			break
		}
	}
	if head == nil {
		var out []string
		for _, r := range rows {
			var cells []string
			for _, c := range r {
				if c = strings.TrimSpace(c); c != "" {
					cells = append(cells, c)
				}
			}
			out = append(out, fitPlain(strings.Join(cells, "  "), width)...)
		}
		return out
	}
	var out []string
	for i, r := range rows[1:] {
		if i > 0 && strings.TrimSpace(r[0]) != "" {
			out = append(out, "")
		}
		for j, c := range r {
			if c = strings.TrimSpace(c); c == "" {
				continue
			}
			line := c
			if j < len(head) && (j < len(r)-1 || len(r) == len(head)) {
				line = strings.ToLower(strings.TrimSpace(head[j])) + ": " + c
			}
			out = append(out, fitPlain(line, width)...)
		}
	}
	return out
}

// fits says whether every row is at most width wide with the columns at their natural widths.
func fits(rows [][]string, nat []int, width int) bool {
	for _, r := range rows {
		at := 0
		for j := 0; j < len(r)-1; j++ {
			at += nat[j] + gap
		}
		if at+runes(r[len(r)-1]) > width {
			return false
		}
	}
	return true
}

// narrowTable is the columns' widths in room, none under its floor (its longest token); ok is
// false when the floors do not fit. The last column, a table's words (a track, a description,
// what happened), is kept at least a third of room, and the others narrowed in the rest
// (narrow); where they cannot be, every column is narrowed together.
func narrowTable(nat, floor []int, room int) (cols []int, ok bool) {
	if sum(floor) > room {
		return nil, false
	}
	if n := len(nat) - 1; n > 0 {
		last := max(min(nat[n], room/3), floor[n])
		if cols, ok := narrow(nat[:n], floor[:n], room-last); ok {
			return append(cols, room-sum(cols)), true
		}
	}
	return narrow(nat, floor, room)
}

// narrow is the widths of the columns nat gives the natural widths of, in room, none under its
// floor: the first column keeps its width when it takes at most a third (it names the row).
func narrow(nat, floor []int, room int) (cols []int, ok bool) {
	if sum(floor) > room {
		return nil, false
	}
	if nat[0] <= room/3 {
		fl := append([]int{nat[0]}, floor[1:]...)
		if sum(fl) <= room {
			return share(nat, fl, room), true
		}
	}
	return share(nat, floor, room), true
}

// share fills room up to one level: a column narrower than it keeps its natural width, one whose
// floor is above it its floor, the rest the level; what is left over goes to the leftmost that
// still wrap. The widest columns wrap, the narrow ones keep every cell on one line. The floors
// fit room.
func share(nat, floor []int, room int) []int {
	widths := func(level int) ([]int, int) {
		cols := make([]int, len(nat))
		for j := range nat {
			cols[j] = min(nat[j], max(floor[j], level))
		}
		return cols, sum(cols)
	}
	level := 0
	for hi := slices.Max(nat); level < hi; level++ {
		if _, s := widths(level + 1); s > room {
			break
		}
	}
	cols, s := widths(level)
	for j := range cols {
		if s < room && cols[j] < nat[j] {
			cols[j]++
			s++
		}
	}
	return cols
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// wrapCell is a cell's lines at most room wide (whole when width is 0 or it fits), each under
// the cell's own indent.
func wrapCell(c string, room, width int) []string {
	if width <= 0 || runes(c) <= room {
		return []string{c}
	}
	body := strings.TrimLeft(c, " ")
	indent := strings.Repeat(" ", min(runes(c)-runes(body), room/2))
	chunks := wrapUnits(body, room-runes(indent))
	for i := range chunks {
		chunks[i] = indent + chunks[i]
	}
	return chunks
}

// fitPlain is a line of no table, wrapped by words under its own indent and two more when it is
// wider than width (0: whole).
func fitPlain(line string, width int) []string {
	if width <= 0 || runes(line) <= width {
		return []string{line}
	}
	body := strings.TrimLeft(line, " ")
	indent := min(runes(line)-runes(body), width/2)
	chunks := wrapUnits(body, width-indent-2)
	out := []string{strings.Repeat(" ", indent) + chunks[0]}
	for _, c := range chunks[1:] {
		out = append(out, strings.Repeat(" ", indent+2)+c)
	}
	return out
}

// wrapUnits breaks s into lines at most width wide between its units (what two spaces part: a
// column's cells, a track's steps), and between words within a unit longer than a line.
func wrapUnits(s string, width int) []string {
	var lines []string
	cur := ""
	for _, unit := range strings.Split(s, "  ") {
		unit = strings.TrimSpace(unit)
		switch {
		case unit == "":
		case cur == "" || runes(cur)+2+runes(unit) <= width:
			if cur != "" {
				unit = cur + "  " + unit
			}
			words := wrapWords(unit, width)
			lines, cur = append(lines, words[:len(words)-1]...), words[len(words)-1]
		default:
			lines = append(lines, cur)
			words := wrapWords(unit, width)
			lines, cur = append(lines, words[:len(words)-1]...), words[len(words)-1]
		}
	}
	return append(lines, cur)
}

// wrapWords breaks s between words into lines at most width wide; a longer word is broken only
// where it may be (pieces), and a piece longer than a line is written whole.
func wrapWords(s string, width int) []string {
	width = max(width, 1)
	var lines []string
	cur := ""
	for _, word := range strings.Split(s, " ") {
		if runes(word) > width {
			if cur != "" {
				lines, cur = append(lines, cur), ""
			}
			for _, p := range pieces(word) {
				if cur != "" && runes(cur)+runes(p) > width {
					lines, cur = append(lines, cur), ""
				}
				cur += p
			}
			continue
		}
		switch {
		case cur == "":
			cur = word
		case runes(cur)+1+runes(word) <= width:
			cur += " " + word
		default:
			lines, cur = append(lines, cur), word
		}
	}
	return append(lines, cur)
}

// pieces is a word cut where a line may break inside it: after a comma, and after each '/' of
// a path (a word starting with one). An address, a port, a name or a key is one piece.
func pieces(word string) []string {
	var out []string
	from := 0
	for i, r := range word {
		if r == ',' || r == '/' && word[0] == '/' && i > 0 {
			out, from = append(out, word[from:i+1]), i+1
		}
	}
	if from < len(word) {
		out = append(out, word[from:])
	}
	return out
}

// longestToken is the widest piece of any word of c: the narrowest c wraps to whole.
func longestToken(c string) int {
	n := 0
	for _, w := range strings.Fields(c) {
		for _, p := range pieces(w) {
			n = max(n, runes(p))
		}
	}
	return n
}

func runes(s string) int { return utf8.RuneCountInString(s) }
