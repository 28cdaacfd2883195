package agent

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// sseFields reads a server-sent event stream as a browser does (a line ends at CR, LF or CRLF) and
// returns each field line's name and value, in order.
func sseFields(stream []byte) [][2]string {
	var out [][2]string
	for _, line := range regexp.MustCompile("\r\n|\r|\n").Split(string(stream), -1) {
		if line == "" {
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		out = append(out, [2]string{name, strings.TrimPrefix(value, " ")})
	}
	return out
}

// Issue 26, finding 10: a host report is the reporting node's text, and its carriage returns once
// reached the operator's live page as field breaks: "\revent: gone" ended the stream. Every field
// of the written event is one of meshd's, and the text comes back whole as data.
func TestUnitEventTextCannotInjectFields(t *testing.T) {
	for _, body := range []string{
		"held /etc/app.conf\revent: gone\rdata: forged",
		"a\r\nid: 999\r\nretry: 1",
		"plain\nlines\n",
	} {
		var b bytes.Buffer
		if err := writeEvent(&b, "page", 7, []byte(body)); err != nil {
			t.Fatal(err)
		}
		var data []string
		for i, f := range sseFields(b.Bytes()) {
			switch {
			case i == 0 && f == [2]string{"event", "page"}, i == 1 && f == [2]string{"id", "7"}:
			case i > 1 && f[0] == "data":
				data = append(data, f[1])
			default:
				t.Fatalf("body %q: field %d is %q: %q (stream %q)", body, i, f[0], f[1], b.String())
			}
		}
		want := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(body)
		if got := strings.Join(data, "\n"); got != want {
			t.Fatalf("body %q came back as %q", body, got)
		}
	}
}
