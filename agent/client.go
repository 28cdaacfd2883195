package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"
)

// Client talks to an agent's operator API over its unix socket.
type Client struct {
	Socket string
	http   *http.Client
}

// NewClient returns a client for the agent listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &Client{Socket: socket, http: &http.Client{Transport: tr}}
}

// Do sends a request and decodes a JSON answer into out (unless out is nil). An error answer
// comes back as an error carrying the agent's message.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		if r, ok := in.(io.Reader); ok {
			body = r
		} else {
			b, err := json.Marshal(in)
			if err != nil {
				return err
			}
			body = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://meshd"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.dialError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e apiError
		b, _ := io.ReadAll(resp.Body)
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return errors.New(e.Error)
		}
		return fmt.Errorf("agent answered %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	if w, ok := out.(io.Writer); ok {
		_, err = io.Copy(w, resp.Body)
		return err
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
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
