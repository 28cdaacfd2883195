package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// A client node runs no Raft: it watches its own declaration on the servers' bus over mTLS, feeds
// it to its host reconciler, posts its host report back after each pass, and answers the
// operator's read commands by asking a server.

// busErr is an answer the bus gave: a refusal is final, anything else is worth the next server.
type busErr struct {
	code int
	msg  string
}

func (e *busErr) Error() string { return e.msg }

// busDo sends one request to the servers' bus, trying each known server in turn from the one that
// last answered, and returns the first answer that is not a server's failure.
func (a *Agent) busDo(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var last error
	a.serversMu.Lock()
	servers := append([]string{}, a.servers...)
	a.serversMu.Unlock()
	for _, addr := range servers {
		resp, err := a.busAt(addr).send(ctx, method, path, in)
		if err == nil && resp.StatusCode < 500 {
			return resp, nil
		}
		if err == nil {
			ae := newAnswerError(resp, resp.Body)
			resp.Body.Close()
			err = fmt.Errorf("server %s answered %s: %s", addr, ae.Status, ae.Body)
		} else {
			err = fmt.Errorf("server %s: %w", addr, err)
		}
		last = err
		if ctx.Err() != nil {
			break
		}
		// Rotate: the next call starts with the next server.
		a.serversMu.Lock()
		if len(a.servers) > 1 && a.servers[0] == addr {
			a.servers = append(a.servers[1:len(a.servers):len(a.servers)], addr)
		}
		a.serversMu.Unlock()
	}
	if last == nil {
		last = errors.New("no server known")
	}
	return nil, last
}

// busAt is the bus of the server at addr, called with this node's certificate.
func (a *Agent) busAt(addr string) jsonHTTP {
	return jsonHTTP{client: a.busClient, base: "https://" + addr}
}

// busJSON is busDo with a JSON answer decoded into out; a 4xx comes back as a busErr.
func (a *Agent) busJSON(ctx context.Context, method, path string, in, out any) error {
	resp, err := a.busDo(ctx, method, path, in)
	if err != nil {
		return err
	}
	err = jsonHTTP{}.read(resp, out) // whichever server answered, its answer reads the same

	var ae *answerError
	if errors.As(err, &ae) {
		return &busErr{code: ae.Code, msg: ae.text("the bus")}
	}
	return err
}

// watchBus is the client's declaration watch: a blocking query by index, reconnecting with backoff
// to each server it knows, passing each changed declaration to the host.
func (a *Agent) watchBus(ctx context.Context) {
	var (
		index   uint64
		last    []byte
		lastErr string
	)
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		var v DeclarationView
		path := fmt.Sprintf("/v1/declaration/%s?index=%d&wait=30s", url.PathEscape(a.node.Name), index)
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err := a.busJSON(rctx, http.MethodGet, path, nil, &v)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if err.Error() != lastErr {
				a.log.Warn("declaration watch: no server answered; retrying", "servers", a.servers, "err", err, "backoff", backoff)
				lastErr = err.Error()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		if lastErr != "" {
			a.log.Info("declaration watch: reconnected")
			lastErr = ""
		}
		backoff = 250 * time.Millisecond
		index = v.Index
		if v.Declaration == nil {
			continue
		}
		b, _ := json.Marshal(v.Declaration)
		if bytes.Equal(b, last) {
			continue
		}
		last = b
		d := v.Declaration
		a.log.Info("declaration", "index", index, "mode", d.Mode, "assigned", d.Assigned, "taken", d.Taken, "resources", len(d.Resources))
		select {
		case a.declarations <- d:
		case <-ctx.Done():
			return
		}
	}
}

// postReports sends the host's report to a server over the bus after each pass, and again now and
// then so a server that restarted (reports live in its memory) has it back, while the node's
// gossip sees no server alive: gossip is how reports travel, the bus is the fallback.
func (a *Agent) postReports(ctx context.Context) {
	var sent time.Time
	var at time.Time
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rep := a.host.Report()
		if rep.When.IsZero() || (rep.When.Equal(sent) && time.Since(at) < 15*time.Second) {
			continue
		}
		if a.serverAlive() {
			// Gossip carries the report, signed, to the servers: the bus is the fallback only.
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := a.busJSON(rctx, http.MethodPost, "/v1/report", rep, nil)
		cancel()
		at = time.Now()
		if err != nil {
			a.log.Warn("host report not delivered; will retry", "err", err)
			continue
		}
		sent = rep.When
	}
}

// clientRoutes is a client node's operator socket: reads are asked of a server; the node's own
// originals are served here; writes are refused, naming where to run them.
func (a *Agent) clientRoutes() http.Handler {
	mux := http.NewServeMux()
	proxy := func(w http.ResponseWriter, req *http.Request) {
		resp, err := a.busDo(req.Context(), http.MethodGet, req.URL.RequestURI(), nil)
		if err != nil {
			writeJSON(w, http.StatusBadGateway, apiError{Error: fmt.Sprintf("node %s is a client and asks a server, but none answered: %v", a.node.Name, err)})
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}
	for _, p := range []string{"GET /v1/status", "GET /v1/nodes/{node}", "GET /v1/modules", "GET /v1/modules/{module}", "GET /v1/declaration/{node}"} {
		mux.HandleFunc(p, proxy)
	}
	mux.HandleFunc("GET /v1/nodes/{node}/original", a.getOriginal)
	mux.HandleFunc("GET /v1/members", a.getMembers)
	mux.HandleFunc("POST /v1/leave", a.postLeave)
	mux.HandleFunc("GET /v1/reach/{node}", a.getReach)
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		msg := fmt.Sprintf("node %s is a client: it holds no record, so %s %s runs on a server (%v); run the command there", a.node.Name, req.Method, req.URL.Path, a.node.Servers)
		writeJSON(w, http.StatusConflict, apiError{Error: msg})
	})
	return mux
}
