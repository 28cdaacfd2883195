package main

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Tables fit the terminal they are written to (issue 36: board rows 281 columns wide on an 80-
// or 120-column terminal): a line wider than the terminal has its last cells wrapped under where
// they begin. Piped, or with --wide, every line is written whole, as scripts and grep read it.

// fallbackWidth is the width of a terminal that says none, with COLUMNS unset.
const fallbackWidth = 80

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

// bar stands in for a '|' of the text while tabwriter marks its columns with '|'.
const bar = '\uE000'

// writeTable writes what text writes (cells separated by tabs) to w in aligned columns, each line
// fitted to width columns; width 0 writes the lines whole.
func writeTable(w io.Writer, width int, text func(w io.Writer)) error {
	if width <= 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		text(tw)
		return tw.Flush()
	}
	var raw, aligned bytes.Buffer
	text(&raw)
	// Debug marks each column's end with '|', so the cells of a line are known after alignment.
	tw := tabwriter.NewWriter(&aligned, 0, 4, 2, ' ', tabwriter.Debug)
	tw.Write([]byte(strings.ReplaceAll(raw.String(), "|", string(bar))))
	if err := tw.Flush(); err != nil {
		return err
	}
	var out strings.Builder
	for _, line := range strings.SplitAfter(aligned.String(), "\n") {
		if line == "" {
			continue
		}
		nl := strings.HasSuffix(line, "\n")
		for _, l := range fitLine(strings.Split(strings.TrimSuffix(line, "\n"), "|"), width) {
			out.WriteString(strings.ReplaceAll(l, string(bar), "|"))
			if nl {
				out.WriteString("\n")
			}
		}
	}
	_, err := io.WriteString(w, out.String())
	return err
}

// fitLine is one line's cells (each padded to its column) as lines at most width wide: whole when
// it fits; else the first cells stay in their columns (as many as take at most half the width)
// and the rest is wrapped by words under where it begins.
func fitLine(cells []string, width int) []string {
	whole := strings.TrimRight(strings.Join(cells, ""), " ")
	if runes(whole) <= width {
		return []string{whole}
	}
	last := len(cells) - 1
	for last > 0 && strings.TrimSpace(cells[last]) == "" {
		last--
	}
	for last > 0 && runes(strings.Join(cells[:last], "")) > width/2 {
		last--
	}
	prefix := strings.Join(cells[:last], "")
	var rest []string
	for _, c := range cells[last:] {
		if c = strings.TrimSpace(c); c != "" {
			rest = append(rest, c)
		}
	}
	indent := runes(prefix)
	if last == 0 { // one cell: wrapped under its own indent, and a little further
		indent = min(runes(cells[0])-runes(strings.TrimLeft(cells[0], " "))+2, width/2)
		prefix = strings.Repeat(" ", indent-2)
	}
	chunks := wrapUnits(strings.Join(rest, "  "), width-indent)
	lines := []string{prefix + chunks[0]}
	for _, c := range chunks[1:] {
		lines = append(lines, strings.Repeat(" ", indent)+c)
	}
	return lines
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

// wrapWords breaks s between words into lines at most width wide; a longer word is cut.
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
			lines, word = append(lines, string(r[:width])), string(r[width:])
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
