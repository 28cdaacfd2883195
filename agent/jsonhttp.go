package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// jsonHTTP is the one way meshd speaks JSON over HTTP to an agent: the CLI to the operator socket
// (Client), a client node to the servers' bus (clientRole), every node to another's bus (peerJSON)
// and a joining machine to a server (enrolAt). It encodes the request, sends it, and reads the
// answer: an error status becomes an *answerError carrying the agent's message, a success is
// decoded into out. Each caller only names the thing in its errors.
type jsonHTTP struct {
	client *http.Client
	// base is the scheme and authority paths are appended to: http://meshd on the socket,
	// https://host:port on a bus.
	base string
	// limit caps how much of an answer is read; 0 reads it all.
	limit int64
}

// send encodes in and sends the request. in is nil (no body), an io.Reader (sent as it is) or a
// value sent as JSON. An error is the transport's, unwrapped, for the caller to name the target.
func (c jsonHTTP) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
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
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	return c.client.Do(req)
}

// read reads an answer and closes its body: a status of 300 or more comes back as an
// *answerError; otherwise the body is copied to out if it is an io.Writer, decoded into it as
// JSON unless it is nil.
func (c jsonHTTP) read(resp *http.Response, out any) error {
	defer resp.Body.Close()
	var body io.Reader = resp.Body
	if c.limit > 0 {
		body = io.LimitReader(resp.Body, c.limit)
	}
	if resp.StatusCode >= 300 {
		return newAnswerError(resp, body)
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

// answerError is an agent's answer with an error status.
type answerError struct {
	Code   int
	Status string
	// Message is the agent's own message (the API's {"error": ...}); empty when the body held none.
	Message string
	// Body is the answer's body, trimmed.
	Body []byte
}

func newAnswerError(resp *http.Response, body io.Reader) *answerError {
	b, _ := io.ReadAll(body)
	e := &answerError{Code: resp.StatusCode, Status: resp.Status, Body: bytes.TrimSpace(b)}
	var msg apiError
	if json.Unmarshal(b, &msg) == nil {
		e.Message = msg.Error
	}
	return e
}

// text is the agent's message or, when it sent none, "WHO answered STATUS: BODY" (WHO may be
// empty).
func (e *answerError) text(who string) string {
	if e.Message != "" {
		return e.Message
	}
	s := fmt.Sprintf("answered %s: %s", e.Status, e.Body)
	if who != "" {
		s = who + " " + s
	}
	return s
}

func (e *answerError) Error() string { return e.text("the agent") }
