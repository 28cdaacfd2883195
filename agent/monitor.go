package agent

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"meshd/api"
)

// `meshd monitor [NODE]` streams a node's log lines as the agent writes them. Every agent tees its
// log (its slog records, formatted as the text handler writes them) to the monitors attached at the
// moment; nothing is kept for later. The operator's socket streams the local agent's lines; on a
// server, NODE's lines come from NODE's bus (GET /v1/monitor, a server's to ask, over mTLS), so the
// operator follows any node from any server. A monitor that reads too slowly loses lines, and is
// told how many, rather than slow the agent down.

// monitorBuffer is how many lines wait for a slow monitor before lines are dropped.
const monitorBuffer = 256

// logHub fans the agent's log lines out to the monitors attached.
type logHub struct {
	mu   sync.Mutex
	subs map[*logSub]struct{}
	// fmtMu serialises formatting, so that the line the text handler writes is the one whose
	// level is in level.
	fmtMu sync.Mutex
	level slog.Level
}

type logSub struct {
	level   slog.Level
	lines   chan []byte
	dropped int
}

func newLogHub() *logHub { return &logHub{subs: map[*logSub]struct{}{}} }

func (h *logHub) subscribe(level slog.Level) *logSub {
	s := &logSub{level: level, lines: make(chan []byte, monitorBuffer)}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return s
}

func (h *logHub) unsubscribe(s *logSub) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
}

// wants says whether any monitor takes lines at level.
func (h *logHub) wants(level slog.Level) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if level >= s.level {
			return true
		}
	}
	return false
}

// Write is the text handler's writer: one call is one formatted line at h.level.
func (h *logHub) Write(p []byte) (int, error) {
	line := append([]byte(nil), p...)
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if h.level < s.level {
			continue
		}
		select {
		case s.lines <- line:
		default:
			s.dropped++
		}
	}
	return len(p), nil
}

// takeDropped returns how many lines s lost since the last call.
func (h *logHub) takeDropped(s *logSub) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := s.dropped
	s.dropped = 0
	return n
}

// teeHandler writes each record to the agent's own handler, and to the monitors attached.
type teeHandler struct {
	inner slog.Handler
	text  slog.Handler // formats for the hub
	hub   *logHub
}

func newTeeHandler(inner slog.Handler, hub *logHub) *teeHandler {
	return &teeHandler{inner: inner, hub: hub, text: slog.NewTextHandler(hub, &slog.HandlerOptions{Level: slog.LevelDebug})}
}

func (t *teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return t.inner.Enabled(ctx, l) || t.hub.wants(l)
}

func (t *teeHandler) Handle(ctx context.Context, r slog.Record) error {
	var err error
	if t.inner.Enabled(ctx, r.Level) {
		err = t.inner.Handle(ctx, r)
	}
	if t.hub.wants(r.Level) {
		t.hub.fmtMu.Lock()
		t.hub.level = r.Level
		_ = t.text.Handle(ctx, r)
		t.hub.fmtMu.Unlock()
	}
	return err
}

func (t *teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &teeHandler{inner: t.inner.WithAttrs(as), text: t.text.WithAttrs(as), hub: t.hub}
}

func (t *teeHandler) WithGroup(name string) slog.Handler {
	return &teeHandler{inner: t.inner.WithGroup(name), text: t.text.WithGroup(name), hub: t.hub}
}

// monitorLevel reads ?level=, info by default.
func monitorLevel(req *http.Request) (slog.Level, error) {
	var l slog.Level
	v := req.URL.Query().Get("level")
	if v == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(v)); err != nil {
		return 0, fmt.Errorf("log level %q: use debug, info, warn or error", v)
	}
	return l, nil
}

// getMonitor is the operator's GET /v1/monitor?node=NODE&level=LEVEL.
func (a *Agent) getMonitor(w http.ResponseWriter, req *http.Request) {
	level, err := monitorLevel(req)
	if err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: err.Error()})
		return
	}
	node := req.URL.Query().Get("node")
	if node == "" || node == a.node.Name {
		a.streamLog(w, req, level)
		return
	}
	if !a.node.Server {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: fmt.Sprintf("node %s is a client: it streams only its own log; run `meshd monitor %s` on a server", a.node.Name, node)})
		return
	}
	a.streamPeerLog(w, req, node, level)
}

// getPeerMonitor is a node's bus route GET /v1/monitor, a server's to ask.
func (a *Agent) getPeerMonitor(w http.ResponseWriter, req *http.Request, _ string) {
	level, err := monitorLevel(req)
	if err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: err.Error()})
		return
	}
	// The bus bounds a whole answer's writing; a monitor lasts as long as its caller stays.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	_ = rc.SetReadDeadline(time.Time{})
	a.streamLog(w, req, level)
}

// streamLog writes this agent's log lines at level and above until the caller goes away.
func (a *Agent) streamLog(w http.ResponseWriter, req *http.Request, level slog.Level) {
	sub := a.logs.subscribe(level)
	defer a.logs.unsubscribe(sub)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "# monitoring node %s's log at level %s and above\n", a.node.Name, level)
	_ = rc.Flush()
	for {
		select {
		case <-req.Context().Done():
			return
		case line := <-sub.lines:
			if n := a.logs.takeDropped(sub); n > 0 {
				fmt.Fprintf(w, "# %d lines dropped: this monitor read too slowly\n", n)
			}
			if _, err := w.Write(line); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}

// streamPeerLog copies node's log lines from its bus to the operator.
func (a *Agent) streamPeerLog(w http.ResponseWriter, req *http.Request, node string, level slog.Level) {
	p, ok := a.peers.gossipView().Peer(node)
	if !ok {
		writeErr(w, notFound(fmt.Sprintf("node %s: no such node in the record", node)))
		return
	}
	client, err := a.peerHTTP(p)
	if err != nil {
		writeErr(w, err)
		return
	}
	// The peer's client bounds a whole answer; a monitor ends when the operator does.
	stream := &http.Client{Transport: client.Transport}
	addr := net.JoinHostPort(p.Advertise, strconv.Itoa(int(p.Bus)))
	preq, err := http.NewRequestWithContext(req.Context(), http.MethodGet, "https://"+addr+"/v1/monitor?level="+url.QueryEscape(level.String()), nil)
	if err != nil {
		writeErr(w, err)
		return
	}
	resp, err := stream.Do(preq)
	if err != nil {
		writeErr(w, fmt.Errorf("node %s (bus %s, tcp port %d): %w", node, addr, p.Bus, err))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		writeErr(w, fmt.Errorf("node %s (bus %s): %s", node, addr, api.NewAnswerError(resp, resp.Body).Text("")))
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if _, err := fmt.Fprintf(w, "%s\n", sc.Bytes()); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
	if req.Context().Err() == nil {
		fmt.Fprintf(w, "# node %s's stream ended: %v\n", node, orEOF(sc.Err()))
	}
}

func orEOF(err error) any {
	if err == nil {
		return "its agent closed it"
	}
	return err
}
