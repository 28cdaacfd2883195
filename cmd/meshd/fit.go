package main

import (
	"bytes"
	"io"
	"os"
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
// a third; none is made narrower than its longest word where that fits) and each cell wrapped
// inside its own column: nothing is cut off. Piped, or with --wide, every line is written
// whole, as scripts and grep read it.

// fallbackWidth is the width of a terminal that says none, with COLUMNS unset.
const fallbackWidth = 80

// gap is the spaces between two columns.
const gap = 2

// minColumn is the narrowest a column is made to fit: under it a table overflows the terminal
// rather than wrap its cells a few letters at a time.
const minColumn = 6

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
	for _, r := range rows {
		for j, c := range r {
			if j < len(r)-1 || len(r)-1 == n {
				nat[j] = max(nat[j], runes(c))
			}
		}
	}
	cols := nat
	if width > 0 && !fits(rows, nat, width) {
		cols = narrowTable(rows, nat, width-gap*n)
	}
	offs := make([]int, n+1)
	for j := 1; j <= n; j++ {
		offs[j] = offs[j-1] + cols[j-1] + gap
	}
	var out []string
	for _, r := range rows {
		chunks := make([][]string, len(r))
		height := 1
		for j, c := range r {
			room := cols[j]
			if j == len(r)-1 && j < n { // a short row's last cell spans to the line's end
				room = max(width-offs[j], minColumn)
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

// floorCaps are the most a column keeps for its longest word when it is narrowed, tried in turn
// until the floors fit; then every column may be narrowed to minColumn.
var floorCaps = []int{16, 10}

// narrowTable is the columns' widths in room. The last column, a table's words (a track, a
// description, what happened), is kept at least a third of room, and the others narrowed in
// the rest (narrow); where they cannot be, every column is narrowed together.
func narrowTable(rows [][]string, nat []int, room int) []int {
	if n := len(nat) - 1; n > 0 {
		last := min(nat[n], room/3)
		if cols, ok := narrow(rows, nat[:n], room-last); ok {
			return append(cols, room-sum(cols))
		}
	}
	cols, _ := narrow(rows, nat, room)
	return cols
}

// narrow is the widths of the columns nat gives the natural widths of, in room: the first
// column keeps its width when it takes at most a third (it names the row), and no column is
// narrowed under its longest word (up to a cap of floorCaps). Where that cannot fit, every
// column may be narrowed to minColumn, and ok is false.
func narrow(rows [][]string, nat []int, room int) (cols []int, ok bool) {
	longest := make([]int, len(nat))
	for _, r := range rows {
		for j, c := range r[:min(len(r), len(nat))] {
			for _, word := range strings.Fields(c) {
				longest[j] = max(longest[j], min(runes(word), nat[j]))
			}
		}
	}
	floor := make([]int, len(nat))
	for _, limit := range floorCaps {
		for j := range floor {
			floor[j] = min(longest[j], limit)
		}
		if nat[0] <= room/3 {
			fl := append([]int{nat[0]}, floor[1:]...)
			if sum(fl) <= room {
				return share(nat, fl, room), true
			}
		}
		if sum(floor) <= room {
			return share(nat, floor, room), true
		}
	}
	for j := range floor {
		floor[j] = min(nat[j], minColumn)
	}
	return share(nat, floor, room), false
}

// share gives each column its natural width when it is at most an even share of room, then a
// column whose floor is more than an even share its floor, and the rest an even share of what
// those leave: the widest columns wrap, the narrow ones keep every cell on one line.
func share(nat, floor []int, room int) []int {
	cols := make([]int, len(nat))
	left := make([]int, 0, len(nat))
	for j := range nat {
		left = append(left, j)
	}
	fix := func(width func(j int) int, when func(j, each int) bool) bool {
		each := room / len(left)
		var rest []int
		for _, j := range left {
			if when(j, each) {
				cols[j] = width(j)
				room -= cols[j]
			} else {
				rest = append(rest, j)
			}
		}
		fixed := len(rest) < len(left)
		left = rest
		return fixed
	}
	natural := func(j int) int { return nat[j] }
	floored := func(j int) int { return floor[j] }
	for len(left) > 0 {
		if fix(natural, func(j, each int) bool { return nat[j] <= each }) ||
			fix(floored, func(j, each int) bool { return floor[j] > each }) {
			continue
		}
		each := room / len(left)
		for i, j := range left {
			cols[j] = max(each, minColumn)
			if i < room%len(left) { // the remainder to the leftmost
				cols[j]++
			}
		}
		break
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

// wrapWords breaks s between words into lines at most width wide; a longer word is cut, after a
// '-', '/', ',' or '.' in it where there is one.
func wrapWords(s string, width int) []string {
	width = max(width, 1)
	var lines []string
	cur := ""
	for _, word := range strings.Split(s, " ") {
		for runes(word) > width {
			if cur != "" {
				lines, cur = append(lines, cur), ""
			}
			r := []rune(word)
			cut := width
			if i := strings.LastIndexAny(string(r[:width]), "-/,."); i > 0 {
				cut = runes(string(r[:width])[:i+1])
			}
			lines, word = append(lines, string(r[:cut])), string(r[cut:])
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

func runes(s string) int { return utf8.RuneCountInString(s) }
