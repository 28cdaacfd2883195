package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// Endpoint is the one way meshd speaks JSON over HTTP to an agent: the CLI to the operator socket
// (Client), a client node to the servers' bus (clientRole), every node to another's bus (peerJSON)
// and a joining machine to a server (enrolAt). It encodes the request, sends it, and reads the
// answer: an error status becomes an *AnswerError carrying the agent's message, a success is
// decoded into out. Each caller only names the thing in its errors.
type Endpoint struct {
	Client *http.Client
	// Base is the scheme and authority paths are appended to: http://meshd on the socket,
	// https://host:port on a bus.
	Base string
	// Limit caps how much of an answer is read; 0 reads it all.
	Limit int64
}

// Send encodes in and sends the request. in is nil (no body), an io.Reader (sent as it is) or a
// value sent as JSON. An error is the transport's, unwrapped, for the caller to name the target.
func (c Endpoint) Send(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	switch v := in.(type) {
	case nil:
	case io.Reader:
		body = v
	default:
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, body)
	if err != nil {
		return nil, err
	}
	return c.Client.Do(req)
}

// Read reads an answer and closes its body: a status of 300 or more comes back as an
// *AnswerError; otherwise the body is copied to out if it is an io.Writer, decoded into it as
// JSON unless it is nil.
func (c Endpoint) Read(resp *http.Response, out any) error {
	defer resp.Body.Close()
	var body io.Reader = resp.Body
	if c.Limit > 0 {
		body = io.LimitReader(resp.Body, c.Limit)
	}
	if resp.StatusCode >= 300 {
		return NewAnswerError(resp, body)
	}
	switch w := out.(type) {
	case nil:
		return nil
	case io.Writer:
		_, err := io.Copy(w, body)
		return err
	}
	return json.NewDecoder(body).Decode(out)
}

// ErrorBody is how every error travels: a message that names the thing.
type ErrorBody struct {
	Error string `json:"error"`
}

// AnswerError is an agent's answer with an error status.
type AnswerError struct {
	Code   int
	Status string
	// Message is the agent's own message (the API's {"error": ...}); empty when the body held none.
	Message string
	// Body is the answer's body, trimmed.
	Body []byte
}

// NewAnswerError reads an answer with an error status into an *AnswerError.
func NewAnswerError(resp *http.Response, body io.Reader) *AnswerError {
	b, _ := io.ReadAll(body)
	e := &AnswerError{Code: resp.StatusCode, Status: resp.Status, Body: bytes.TrimSpace(b)}
	var msg ErrorBody
	if json.Unmarshal(b, &msg) == nil {
		e.Message = msg.Error
	}
	return e
}

// Text is the agent's message or, when it sent none, "WHO answered STATUS: BODY" (WHO may be
// empty).
func (e *AnswerError) Text(who string) string {
	if e.Message != "" {
		return e.Message
	}
	s := fmt.Sprintf("answered %s: %s", e.Status, e.Body)
	if who != "" {
		s = who + " " + s
	}
	return s
}

func (e *AnswerError) Error() string { return e.Text("the agent") }
