package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"
)

// DefaultSocket is where the operator's API listens unless --socket or MESHD_SOCKET says otherwise.
const DefaultSocket = "/run/meshd/meshd.sock"

// Client talks to an agent's operator API over its unix socket, or, with an operator credential,
// to the operator's API on a server's bus (/v1/op) over mTLS.
type Client struct {
	Socket string
	// Stale asks a follower server to answer reads from its own record instead of the leader's.
	Stale bool
	// Err, when set, is what every request answers: the client could not be made (a credential
	// file that does not read).
	Err error
	ep  Endpoint
	// bus, for a credential's client, are the servers' bus addresses to try in turn; via names
	// the credential.
	bus []string
	via string
	// last is what the last successful answer said about itself.
	last Answered
}

// Answered is what an answer says about itself: who served it and, for a write, the index it was
// committed and applied at.
type Answered struct {
	Write    bool
	ServedBy string
	// Stale is set when a follower answered from its own record: how far behind it may be.
	Stale string
	Index string
}

// Last is what the last successful answer said about itself.
func (c *Client) Last() Answered { return c.last }

// NewClient returns a client for the agent listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	ep := Endpoint{Client: &http.Client{Transport: tr}, Base: "http://meshd"}
	return &Client{Socket: socket, ep: ep}
}

// NewBusClient returns a client for the operator's API on the servers' bus at addrs, over mTLS
// with cfg (an operator credential's, named via). Each server is tried in turn: a read moves on
// when one fails, a write only when it never reached the server, so it is applied once. A server
// that does not lead forwards to the leader itself.
func NewBusClient(via string, addrs []string, cfg *tls.Config) *Client {
	tr := &http.Transport{TLSClientConfig: cfg, TLSHandshakeTimeout: 10 * time.Second, IdleConnTimeout: time.Minute}
	return &Client{Socket: "the servers' bus (" + strings.Join(addrs, ", ") + ")", ep: Endpoint{Client: &http.Client{Transport: tr}},
		bus: append([]string{}, addrs...), via: via}
}

// Do sends a request and decodes a JSON answer into out (unless out is nil; an io.Writer gets the
// answer as it is). in is a value sent as JSON, or an io.Reader sent as it is. An error answer
// comes back as an error carrying the agent's message.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	if c.Err != nil {
		return c.Err
	}
	if c.Stale && method == http.MethodGet {
		if strings.Contains(path, "?") {
			path += "&stale=1"
		} else {
			path += "?stale=1"
		}
	}
	var resp *http.Response
	var err error
	if len(c.bus) > 0 {
		resp, err = c.sendBus(ctx, method, path, in)
	} else if resp, err = c.ep.Send(ctx, method, path, in); err != nil {
		err = c.dialError(err)
	}
	if err != nil {
		return err
	}
	c.last = Answered{Write: method != http.MethodGet, ServedBy: resp.Header.Get(HeaderServedBy),
		Stale: resp.Header.Get(HeaderStale), Index: resp.Header.Get(HeaderIndex)}
	err = c.ep.Read(resp, out)
	var ae *AnswerError
	if errors.As(err, &ae) {
		return errors.New(ae.Text("agent"))
	}
	return err
}

// Get is Do with GET and no body.
func (c *Client) Get(ctx context.Context, path string, out any) error {
	return c.Do(ctx, http.MethodGet, path, nil, out)
}

// Post is Do with POST.
func (c *Client) Post(ctx context.Context, path string, in, out any) error {
	return c.Do(ctx, http.MethodPost, path, in, out)
}

// sendBus sends the request to each server's bus in turn (busClient's rule) and returns the
// first answer taken.
func (c *Client) sendBus(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body []byte
	if r, ok := in.(io.Reader); ok {
		b, err := io.ReadAll(r)
		if err != nil {
			return nil, err
		}
		body = b
	} else if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = b
	}
	read := method == http.MethodGet
	var tried []string
	for _, addr := range c.bus {
		ep := c.ep
		ep.Base = "https://" + addr + "/v1/op"
		var send any
		if body != nil {
			send = bytes.NewReader(body)
		}
		resp, err := ep.Send(ctx, method, path, send)
		switch {
		case err == nil && (resp.StatusCode < 500 || (!read && resp.Header.Get(HeaderNotProposed) == "")):
			return resp, nil
		case err == nil:
			ae := NewAnswerError(resp, io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			tried = append(tried, fmt.Sprintf("server %s: %s", addr, ae.Text("it")))
		case read || sentNothing(err):
			tried = append(tried, fmt.Sprintf("server %s: %v", addr, err))
		default:
			return nil, fmt.Errorf("operator credential %s: sent %s %s to server %s, which did not answer: %w; the write's outcome is unknown: check with `meshd status` before sending it again", c.via, method, path, addr, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("operator credential %s: no server's bus answered (%s); the credential file lists the servers it was made with: make a new one on a server if they moved", c.via, strings.Join(tried, "; "))
}

// sentNothing says a request failed before it reached the server: a failed dial, or a TLS
// handshake the server refused (the credential itself, when it is not the mesh's).
func sentNothing(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "tls: ")
}

func (c *Client) dialError(err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("no agent is listening on %s: is `meshd agent` running? "+
			"(--socket or MESHD_SOCKET name another socket)", c.Socket)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("permission denied on %s: the operator socket is root's; run meshd as root",
			c.Socket)
	}
	return fmt.Errorf("agent on %s: %w", c.Socket, err)
}

// WaitReady polls the agent's status until it answers with a leader, up to d.
func (c *Client) WaitReady(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		var st StatusView
		if last = c.Get(ctx, "/v1/status", &st); last == nil && st.Leader.ID != "" {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last == nil {
		last = errors.New("no raft leader")
	}
	return fmt.Errorf("agent on %s not ready after %s: %w", c.Socket, d, last)
}
