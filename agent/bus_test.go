package agent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/internal/testenv"
	"meshd/pki"
	"meshd/setup"
)

// startBus serves ts's bus until the test ends and waits until it answers.
func (ts *testServer) startBus(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go ts.s.bus.runBus(ctx)
	if err := testenv.Poll(t, 10*time.Second, func() error {
		c, err := net.DialTimeout("tcp", ts.busAddr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("bus %s never listened: %v\n%s", ts.busAddr, err, ts.log.String())
	}
}

// fromAddr is an HTTPS client on the bus whose connections come from the loopback address src;
// it checks nothing of the server (it is the attacker's).
func fromAddr(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DialContext: d.DialContext,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxIdleConnsPerHost: 4}}
}

// goodEnrolment makes a token the way `meshd token create` does and enrols node with it through
// join's own client (enrolAt).
func (ts *testServer) goodEnrolment(t *testing.T, node string) (*api.EnrolResponse, error) {
	t.Helper()
	key, _ := pki.NewNodeKey()
	return ts.enrolWith(t, ts.newToken(t, false), node, key, false)
}

// newToken makes a token (a server's with server) the way `meshd token create` does.
func (ts *testServer) newToken(t *testing.T, server bool) string {
	t.Helper()
	tok, err := pki.SignToken(ts.ca, pki.TokenPayload{ID: pki.NewTokenID(), Mode: string(fsm.Adopted), Exp: time.Now().Add(time.Hour).Unix(), Bus: []string{ts.busAddr}, Server: server})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := propose(ts.s.rec, fsm.OpTokenCreate, fsm.TokenCreate{Hash: pki.TokenHash(tok), Mode: fsm.Adopted, Expires: time.Now().Add(time.Hour).UTC(), Server: server}); err != nil {
		t.Fatal(err)
	}
	return tok
}

// enrolWith enrols node with tok and key as `meshd join` does: the request signed with key.
func (ts *testServer) enrolWith(t *testing.T, tok, node string, key ed25519.PrivateKey, server bool) (*api.EnrolResponse, error) {
	t.Helper()
	in := api.EnrolRequest{Token: tok, Node: node, ID: node + "-id", Advertise: "127.0.0.3", Server: server}
	setup.SignEnrolment(&in, key, time.Now())
	body, _ := json.Marshal(in)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return setup.EnrolOnce(ctx, ts.busAddr, tok, pki.Fingerprint(ts.ca.Cert), body)
}

// Issue 14: /v1/enrol is open to anyone and each refusal logged the caller's node field (up to
// 1 MB) at warn, an unauthenticated way to fill the disk. A flood of bad enrolments with huge
// names, oversized bodies and connections that never speak, all from one address, now leaves the
// log a few short lines, and a good enrolment from another address still works, and gets a
// client node's certificate.
func TestBusUnderAbuse(t *testing.T) {
	t.Parallel()
	ts := startTestServer(t)
	ts.startBus(t)
	const attacker = "127.0.0.2"

	// Connections that never send a byte, more than one address may hold.
	var idle []net.Conn
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(attacker)}, Timeout: 5 * time.Second}
	for range busMaxConnsPerIP + 8 {
		c, err := d.Dial("tcp", ts.busAddr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	// Each connection is read at once, in parallel, until well before the handshake timeout would
	// close the others: those over the limit are closed already.
	var closed atomic.Int32
	var wg sync.WaitGroup
	for _, c := range idle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, err := c.Read(make([]byte, 1))
			var ne net.Error
			if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
				closed.Add(1)
			}
		}()
	}
	wg.Wait()
	if closed.Load() != 8 {
		t.Errorf("of %d silent connections from %s, %d were closed at once, want the 8 over the limit of %d", len(idle), attacker, closed.Load(), busMaxConnsPerIP)
	}
	for _, c := range idle {
		c.Close()
	}

	// A good enrolment still works while the flood runs (from another address).
	flood := fromAddr(attacker)
	huge := strings.Repeat("n", 32<<10)
	sent, refused := 0, 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 300 {
			body := fmt.Sprintf(`{"token":"garbage.%d","node":%q,"public_key":"x"}`, i, huge)
			if i%50 == 0 {
				body = fmt.Sprintf(`{"token":"x","node":%q}`, strings.Repeat("m", 2<<20))
			}
			resp, err := flood.Post("https://"+ts.busAddr+"/v1/enrol", "application/json", strings.NewReader(body))
			sent++
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 400 && resp.StatusCode < 500 && len(b) < 4<<10 {
				refused++
			}
		}
	}()
	out, err := ts.goodEnrolment(t, "edge")
	<-done
	if err != nil {
		t.Fatalf("a good enrolment during the flood: %v", err)
	}
	cert, err := pki.ParseCert([]byte(out.CertPEM))
	if err != nil || pki.RoleOf(cert) != pki.ClientCert {
		t.Fatalf("the enrolled node's certificate is not a client node's: %v %v", err, cert)
	}
	if refused < sent-2 {
		t.Errorf("of %d bad enrolments, %d were refused with a short answer", sent, refused)
	}

	log := ts.log.String()
	lines := strings.Count(log, "enrolment refused")
	t.Logf("%d bad enrolments: %d refused, %d log lines saying so, log %d bytes", sent, refused, lines, len(log))
	if lines == 0 || lines > 10 {
		t.Errorf("refused enrolments logged %d times, want 1..10 (rate-limited)", lines)
	}
	if len(log) > 32<<10 || strings.Contains(log, strings.Repeat("n", 100)) {
		t.Errorf("the log grew to %d bytes, or holds the caller's node field whole", len(log))
	}
	if !bytes.Contains([]byte(log), []byte("node enrolled")) {
		t.Errorf("the good enrolment is not in the log:\n%s", log)
	}
}
