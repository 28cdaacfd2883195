package agent

import (
	"context"
	"errors"
	"fmt"
	"meshd/api"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"
)

// Client talks to an agent's operator API over its unix socket.
type Client struct {
	Socket string
	// Stale asks a follower server to answer reads from its own record instead of the leader's.
	Stale bool
	api   api.Endpoint
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
	return &Client{Socket: socket, api: api.Endpoint{Client: &http.Client{Transport: tr}, Base: "http://meshd"}}
}

// Do sends a request and decodes a JSON answer into out (unless out is nil; an io.Writer gets the
// answer as it is). in is a value sent as JSON, or an io.Reader sent as it is. An error answer
// comes back as an error carrying the agent's message.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	if c.Stale && method == http.MethodGet {
		if strings.Contains(path, "?") {
			path += "&stale=1"
		} else {
			path += "?stale=1"
		}
	}
	resp, err := c.api.Send(ctx, method, path, in)
	if err != nil {
		return c.dialError(err)
	}
	c.last = Answered{Write: method != http.MethodGet, ServedBy: resp.Header.Get(hdrServedBy), Stale: resp.Header.Get(hdrStale), Index: resp.Header.Get(hdrIndex)}
	err = c.api.Read(resp, out)
	var ae *api.AnswerError
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

func (c *Client) dialError(err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("no agent is listening on %s: is `meshd agent` running? (--socket or MESHD_SOCKET name another socket)", c.Socket)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("permission denied on %s: the operator socket is root's; run meshd as root", c.Socket)
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
