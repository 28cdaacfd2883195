package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"meshd/internal/testenv"
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

// Issue 26, finding 4: live pages were streamed without a bound to whoever reached the
// listener (no credential asked). The server streams pageMaxStreams at once; one more is told so,
// and a place freed is taken again.
func TestPageEventStreamsAreCapped(t *testing.T) {
	ts := startTestServer(t)
	srv := httptest.NewServer(ts.s.statusPage())
	defer srv.Close()
	open := func() (*http.Response, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		return resp, cancel
	}
	var cancels []context.CancelFunc
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	for i := range pageMaxStreams {
		resp, cancel := open()
		cancels = append(cancels, cancel)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("live page %d of %d: %s", i+1, pageMaxStreams, resp.Status)
		}
	}
	resp, cancel := open()
	if resp.StatusCode != http.StatusServiceUnavailable {
		cancel()
		t.Fatalf("live page %d: %s, want 503", pageMaxStreams+1, resp.Status)
	}
	body, _ := io.ReadAll(resp.Body)
	cancel()
	if !strings.Contains(string(body), "live pages already") {
		t.Fatalf("live page %d refused with %q, which does not say why", pageMaxStreams+1, body)
	}
	cancels[0]()
	if err := testenv.Poll(t, 5*time.Second, func() error {
		resp, cancel := open()
		defer cancel()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("after one live page closed: %s", resp.Status)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
