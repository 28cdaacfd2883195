package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"meshd/api"
	"meshd/internal/testenv"
	"meshd/pki"
)

const proxyMark = 0x99

// answerLosingProxy sits, inside netns, between a joining machine and the bus at upstream: nft
// redirects the machine's connections to upstream to it (its own, marked, go out). It passes the
// TLS handshake and the request through and then drops the server's answer and closes the
// connection: the enrolment reaches the server, its answer never reaches join. A TLS 1.3 client
// sends its Finished and then its request as application-data records; the server's answer is
// the first large record after them (its session tickets are small).
func answerLosingProxy(t *testing.T, netns, upstream string) (stop func()) {
	t.Helper()
	var ln net.Listener
	if err := testenv.InNetns(netns, func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:0"); return err }); err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	host, uport, _ := net.SplitHostPort(upstream)
	rule := fmt.Sprintf("table ip meshdtest { chain out { type nat hook output priority -100; meta mark != %d ip daddr %s tcp dport %s dnat to 127.0.0.1:%d; }; }", proxyMark, host, uport, port)
	if out, err := exec.Command("ip", "netns", "exec", netns, "nft", rule).CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v %s", netns, err, out)
	}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				relayLosingAnswer(netns, c, upstream)
			}()
		}
	}()
	return func() {
		ln.Close()
		_ = exec.Command("ip", "netns", "exec", netns, "nft", "delete", "table", "ip", "meshdtest").Run()
		wg.Wait()
	}
}

func relayLosingAnswer(netns string, c net.Conn, upstream string) {
	defer c.Close()
	var u net.Conn
	err := testenv.InNetns(netns, func() (err error) {
		d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, proxyMark)
			}); err != nil {
				return err
			}
			return serr
		}}
		u, err = d.Dial("tcp", upstream)
		return err
	})
	if err != nil {
		return
	}
	defer u.Close()
	var requested atomic.Bool
	go func() {
		appData := 0
		for {
			rec, err := readRecord(c)
			if err != nil {
				return
			}
			if rec[0] == 0x17 {
				if appData++; appData >= 2 {
					requested.Store(true)
				}
			}
			if _, err := u.Write(rec); err != nil {
				return
			}
		}
	}()
	for {
		rec, err := readRecord(u)
		if err != nil {
			return
		}
		if requested.Load() && len(rec) > 1000 {
			// The answer: read to its end on the server's side, and tell the client nothing.
			_ = u.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, _ = io.Copy(io.Discard, u)
			return
		}
		if _, err := c.Write(rec); err != nil {
			return
		}
	}
}

// readRecord reads one TLS record, its header included.
func readRecord(r io.Reader) ([]byte, error) {
	h := make([]byte, 5)
	if _, err := io.ReadFull(r, h); err != nil {
		return nil, err
	}
	rec := make([]byte, 5+int(binary.BigEndian.Uint16(h[3:5])))
	copy(rec, h)
	_, err := io.ReadFull(r, rec[5:])
	return rec, err
}

// Issue 14: a lost enrolment answer burned the name. The first join's answer is dropped on the
// way back: join says the enrolment was sent and keeps its keys; the record holds the node. The
// same join again gets that enrolment's answer (the same address, the recorded key), and the
// node's certificate works on the bus. Another machine with the same, spent token is refused.
func TestProcessJoinAgainAfterALostAnswer(t *testing.T) {
	hub, edge := newNode(t), newNode(t)
	link(t, hub, edge, "192.0.2.1", "192.0.2.2")
	const bus = "192.0.2.1:17070"
	hub.genesis("--adopted", "--advertise", "192.0.2.1", "--port", "bus=17070")
	hub.startAgent("--docker-host", noDocker, "--reconcile-interval", "200ms")
	var tv api.TokenView
	hub.jsonOf(&tv, "token", "create", "--adopted")

	stop := answerLosingProxy(t, edge.netns, bus)
	out, errs, code := edge.joinIn(tv.Token, "--name", "edge", "--data-dir", edge.dir)
	stop()
	if code == 0 || !strings.Contains(errs, "run the same join again") {
		t.Fatalf("join whose answer was lost: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("join whose answer was lost: %s", strings.TrimSpace(errs))
	var first api.NodeView
	hub.jsonOf(&first, "node", "show", "edge")
	if _, err := os.Stat(filepath.Join(edge.dir, "join.pending")); err != nil {
		t.Fatalf("the lost join kept no keys: %v", err)
	}

	out, errs, code = edge.joinIn(tv.Token, "--name", "edge", "--data-dir", edge.dir)
	if code != 0 || !strings.Contains(out, "answered now") {
		t.Fatalf("the same join again: exit %d\n%s%s", code, out, errs)
	}
	if m := recoveryRe.FindStringSubmatch(out); m == nil {
		t.Fatalf("the join that made the seal key printed no recovery code when it finished:\n%s", out)
	}
	var again api.NodeView
	hub.jsonOf(&again, "node", "show", "edge")
	if again.Node.Address != first.Node.Address || again.Node.PublicKey != first.Node.PublicKey || !strings.Contains(out, first.Node.Address) {
		t.Fatalf("after the join again the record has edge at %s key %s, it had %s key %s; join printed:\n%s",
			again.Node.Address, again.Node.PublicKey, first.Node.Address, first.Node.PublicKey, out)
	}
	if _, err := os.Stat(filepath.Join(edge.dir, "join.pending")); !os.IsNotExist(err) {
		t.Fatalf("the finished join left its pending keys: %v", err)
	}
	sec, err := pki.OpenNodeSecrets(edge.dir, edge.sealKey)
	if err != nil {
		t.Fatal(err)
	}
	id, err := pki.Identity(sec.NodeCertPEM, sec.CACertPEM, sec.NodeKey)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := busGet(t, edge.netns, bus, "/v1/declaration/edge", &id); code != http.StatusOK {
		t.Fatalf("edge's certificate from the join again on the bus: %d %s", code, body)
	}

	// Another machine (another key) with the spent token: refused, nothing written there.
	other := t.TempDir() + "/other"
	if out, errs, code := edge.joinIn(tv.Token, "--name", "edge", "--data-dir", other, "--seal-key", t.TempDir()+"/seal.key"); code != 1 || !strings.Contains(errs, "already enrolled") {
		t.Fatalf("the spent token with another key: exit %d\n%s%s", code, out, errs)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Fatalf("the refused join left its data dir %s: %v", other, err)
	}
}

// Issue 26 finding 1: the mesh CA key travels in a server's first answer only. A server join
// whose answer was lost, run again, gets no CA key: it writes nothing, drops its pending keys and
// tells the operator to remove the node and make a new server token; doing so joins the machine.
func TestProcessServerJoinAgainGetsNoCAKey(t *testing.T) {
	hub, s2 := newNode(t), newNode(t)
	link(t, hub, s2, "192.0.2.1", "192.0.2.2")
	const bus = "192.0.2.1:17070"
	hub.genesis("--adopted", "--advertise", "192.0.2.1", "--port", "bus=17070")
	hub.startAgent("--docker-host", noDocker, "--reconcile-interval", "200ms")
	var tv api.TokenView
	hub.jsonOf(&tv, "token", "create", "--adopted", "--server")
	join := []string{"--name", "s2", "--data-dir", s2.dir, "--advertise", "192.0.2.2"}

	stop := answerLosingProxy(t, s2.netns, bus)
	out, errs, code := s2.joinIn(tv.Token, join...)
	stop()
	if code == 0 || !strings.Contains(errs, "run the same join again") {
		t.Fatalf("server join whose answer was lost: exit %d\n%s%s", code, out, errs)
	}
	out, errs, code = s2.joinIn(tv.Token, join...)
	for _, want := range []string{"the CA key is never sent twice", "meshd node remove s2", "new server token"} {
		if code != 1 || !strings.Contains(errs, want) {
			t.Fatalf("the same server join again: exit %d, want it to say %q\n%s%s", code, want, out, errs)
		}
	}
	t.Logf("the same server join again: %s", strings.TrimSpace(errs))
	for _, f := range []string{filepath.Join(s2.dir, "join.pending"), filepath.Join(s2.dir, "node.json"), pki.Path(s2.dir, pki.CAKeyFile)} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Fatalf("the refused server join left %s: %v", f, err)
		}
	}
	if _, errs, code := hub.run("node", "remove", "s2"); code != 0 {
		t.Fatalf("node remove s2: exit %d %s", code, errs)
	}
	hub.jsonOf(&tv, "token", "create", "--adopted", "--server")
	if out, errs, code := s2.joinIn(tv.Token, join...); code != 0 || !strings.Contains(out, "a server") {
		t.Fatalf("s2 with a new server token: exit %d\n%s%s", code, out, errs)
	}
}
