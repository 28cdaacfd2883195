package agent

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/host"
	"meshd/internal/testenv"
	"meshd/pki"
	"meshd/setup"
)

// BenchmarkOperatorCommit is issue 18's Raft figure: an operator command (`meshd token create`,
// which the leader signs and commits through Raft) from its HTTP request to its answer, which
// the API gives only once Raft committed and applied it; with one server and with three, all
// on loopback, each server's log on disk (raft-boltdb, fsync on every append). Beside it, etcd
// (Debian's etcd-server) on the same machine doing the equivalent put through its own HTTP
// API (/v3/kv/put), with one member and with three, also on loopback and on disk. Each
// iteration is one command; p50-ms and p99-ms are over the iterations (-benchtime 200x).
func BenchmarkOperatorCommit(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("meshd/%d", n), func(b *testing.B) {
			url := startCommitGroup(b, n)
			body := []byte(`{"mode":"adopted","ttl":"1h"}`)
			commitLatencies(b, func() error { return postOK(url+"/v1/tokens", body) })
		})
		b.Run(fmt.Sprintf("etcd/%d", n), func(b *testing.B) {
			url := startEtcd(b, n)
			i := 0
			commitLatencies(b, func() error {
				i++
				kv, _ := json.Marshal(map[string]string{
					"key":   base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("/meshd/tokens/%d", i))),
					"value": base64.StdEncoding.EncodeToString([]byte(`{"mode":"adopted","ttl":"1h"}`)),
				})
				return postOK(url+"/v3/kv/put", kv)
			})
		})
	}
}

// commitLatencies runs one command per iteration and reports the latencies' p50 and p99.
func commitLatencies(b *testing.B, do func() error) {
	for range 5 { // warm: connections made, leader settled
		if err := do(); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := do(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	pick := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pick(0.50), "p50-ms")
	b.ReportMetric(pick(0.99), "p99-ms")
}

func postOK(url string, body []byte) error {
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s: %s", url, resp.Status, b)
	}
	return nil
}

// startCommitGroup raises n real server roles on loopback (one mesh CA, a server certificate
// each, Raft over its mTLS transport, logs on disk), bootstraps them as one group, commits an
// adopted genesis and serves the leader's operator API on a loopback port: the API the local
// socket serves, without the CLI in front.
func startCommitGroup(b *testing.B, n int) string {
	ca, err := pki.NewCA("hub", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var roles []*serverRole
	var boot raft.Configuration
	for i := range n {
		name := "s" + strconv.Itoa(i)
		id, certPEM, key := nodeIdentity(b, ca, name, pki.ServerCert)
		nf := &setup.NodeFile{Name: name, ID: name + "-id", Server: true, Advertise: "127.0.0.1", RaftPort: freeLoopbackPort(b)}
		a := &Agent{cfg: Config{DataDir: b.TempDir(), LogOutput: io.Discard}, node: nf, log: quiet, identity: id,
			caCert: ca.Cert, declarations: make(chan *fsm.Declaration, 1),
			secrets: &pki.NodeSecrets{NodeKey: key, NodeCertPEM: certPEM, CACertPEM: ca.CertPEM, Keyring: pki.NewKeyring(), CA: ca, Seal: pki.NewSealKey("")}}
		a.keys = a.newKeyrings()
		a.host = openTestHost(b, host.Config{})
		s, err := newServerRole(a.core())
		if err != nil {
			b.Fatal(err)
		}
		a.setKind(s)
		if err := s.open(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.close() })
		roles = append(roles, s)
		boot.Servers = append(boot.Servers, raft.Server{ID: raft.ServerID(nf.ID), Address: s.rec.LocalAddr()})
	}
	for _, s := range roles {
		if err := s.rec.Bootstrap(boot.Servers); err != nil {
			b.Fatal(err)
		}
	}
	var leader *serverRole
	if err := testenv.Poll(b, 20*time.Second, func() error {
		for _, s := range roles {
			if s.rec.IsLeader() {
				leader = s
				return nil
			}
		}
		return fmt.Errorf("no leader among %d servers", n)
	}); err != nil {
		b.Fatal(err)
	}
	nf := leader.node
	key := leader.secrets.NodeKey
	if _, err := propose(leader.rec, fsm.OpGenesis, fsm.Genesis{Node: nf.Name, ID: nf.ID, Mode: fsm.Adopted, Advertise: "127.0.0.1",
		PublicKey: pki.PublicKeyString(key.Public().(ed25519.PublicKey)), Catalogue: catalogue.DefaultSources(),
		Settings: map[string]string{"mesh.raft": strconv.Itoa(int(nf.RaftPort)), "mesh.bus": strconv.Itoa(int(freeLoopbackPort(b)))}}); err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(leader.fwd.leaderAnswers("/v1/op", leader.records.routes()))
	b.Cleanup(srv.Close)
	return srv.URL
}

// startEtcd starts n etcd members (Debian's etcd-server) on loopback, each with its data on
// disk in a temporary directory, and returns one member's client URL.
func startEtcd(b *testing.B, n int) string {
	if m := testenv.Missing(false, "etcd"); len(m) > 0 {
		testenv.Require(b, "the Raft figure runs etcd beside meshd (scripts/deps.sh --bench installs etcd-server)", m...)
	}
	type member struct{ name, peer, client string }
	var ms []member
	var cluster []string
	for i := range n {
		m := member{name: "e" + strconv.Itoa(i),
			peer:   "http://127.0.0.1:" + strconv.Itoa(int(freeLoopbackPort(b))),
			client: "http://127.0.0.1:" + strconv.Itoa(int(freeLoopbackPort(b)))}
		ms = append(ms, m)
		cluster = append(cluster, m.name+"="+m.peer)
	}
	for _, m := range ms {
		dir := b.TempDir()
		logf, err := os.Create(filepath.Join(dir, "etcd.log"))
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command("etcd", "--name", m.name, "--data-dir", filepath.Join(dir, "data"),
			"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
			"--listen-client-urls", m.client, "--advertise-client-urls", m.client,
			"--initial-cluster", strings.Join(cluster, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "meshbench")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			logf.Close()
		})
	}
	url := ms[0].client
	if err := testenv.Poll(b, 30*time.Second, func() error {
		return postOK(url+"/v3/kv/put", []byte(`{"key":"cmVhZHk=","value":"MQ=="}`))
	}); err != nil {
		b.Fatalf("etcd (%d members) did not take a put: %v", n, err)
	}
	return url
}
