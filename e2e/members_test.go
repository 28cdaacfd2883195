// Gossip as the enrolment test reads it: members and their states, reports and rejected
// messages, the sealed keyring, and the forger (this binary as a member without an identity).

package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"meshd/gossip"
	"meshd/lab"
	"meshd/pki"
)

type memberLine struct {
	Name  string `json:"name"`
	State string `json:"state"`
}

func members(ctx context.Context, m *lab.Machine) (map[string]string, string, error) {
	out, err := meshd(ctx, m, "members", "--json")
	if err != nil {
		return nil, "", err
	}
	var v struct {
		Members        []memberLine `json:"members"`
		DetectionBound string       `json:"detection_bound"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return nil, "", fmt.Errorf("members --json: %v: %s", err, out)
	}
	by := map[string]string{}
	for _, l := range v.Members {
		by[l.Name] = l.State
	}
	return by, v.DetectionBound, nil
}

func allAlive(ctx context.Context, m *lab.Machine, names ...string) error {
	by, _, err := members(ctx, m)
	if err != nil {
		return err
	}
	for _, n := range names {
		if by[n] != "alive" {
			return fmt.Errorf("%s sees %s %q (members: %v)", m.Name, n, by[n], by)
		}
	}
	return nil
}

func memberState(ctx context.Context, m *lab.Machine, name, state string) error {
	by, _, err := members(ctx, m)
	if err != nil {
		return err
	}
	if by[name] != state {
		return fmt.Errorf("%s sees %s %q, want %s", m.Name, name, by[name], state)
	}
	return nil
}

func detectionBound(ctx context.Context, m *lab.Machine) (time.Duration, error) {
	_, s, err := members(ctx, m)
	if err != nil {
		return 0, err
	}
	return time.ParseDuration(s)
}

// reportWhen is when node's last report (as m's agent has it) was made.
func reportWhen(ctx context.Context, m *lab.Machine, node string) (time.Time, error) {
	out, err := meshd(ctx, m, "node", "show", node, "--json")
	if err != nil {
		return time.Time{}, err
	}
	var v struct {
		Report *struct {
			When time.Time `json:"when"`
		} `json:"report"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return time.Time{}, err
	}
	if v.Report == nil {
		return time.Time{}, fmt.Errorf("%s has no report of %s", m.Name, node)
	}
	return v.Report.When, nil
}

func rejected(ctx context.Context, t *testing.T, m *lab.Machine) map[string]uint64 {
	t.Helper()
	out, err := meshd(ctx, m, "status", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Gossip struct {
			Rejected map[string]uint64 `json:"rejected"`
		} `json:"gossip"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	return st.Gossip.Rejected
}

// sealedRing unseals m's gossip keyring with its seal key, as the agent does.
func sealedRing(ctx context.Context, t *testing.T, m *lab.Machine) [][]byte {
	t.Helper()
	return machineSecrets(ctx, t, m).Keyring.Keys
}

// machineSecrets copies m's node credentials and seal key out of the machine and unseals them
// as m's agent does: what root on m holds.
func machineSecrets(ctx context.Context, t *testing.T, m *lab.Machine) *pki.NodeSecrets {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{pki.NodeKeyFile, pki.NodeCertFile, pki.CACertFile, pki.GossipKeyFile} {
		b, err := m.ReadFile(ctx, "/var/lib/meshd/pki/"+f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, pki.Subdir), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pki.Path(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	seal, err := m.ReadFile(ctx, "/etc/meshd/seal.key")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "seal.key"), seal, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := pki.OpenNodeSecrets(dir, filepath.Join(dir, "seal.key"))
	if err != nil {
		t.Fatalf("%s: unseal: %v", m.Name, err)
	}
	return s
}

// sealedKeyOf returns, base64, the key on m's sealed ring with fingerprint id.
func sealedKeyOf(ctx context.Context, t *testing.T, m *lab.Machine, id string) string {
	t.Helper()
	for _, k := range sealedRing(ctx, t, m) {
		if gossip.KeyID(k) == id {
			return base64.StdEncoding.EncodeToString(k)
		}
	}
	t.Fatalf("%s's sealed keyring has no key %s", m.Name, id)
	return ""
}

// The forger: this test binary, run on a lab machine with MESHD_E2E_FORGER=1, is a gossip member
// that holds the mesh's gossip key but not the identity key the node it names enrolled with. It
// joins, publishes one report and stays until killed.
func init() {
	if os.Getenv("MESHD_E2E_FORGER") == "" {
		return
	}
	if err := runForger(); err != nil {
		fmt.Fprintln(os.Stderr, "forger:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runForger() error {
	_, id, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	var ring [][]byte
	for _, s := range strings.Split(os.Getenv("FORGER_KEYS"), ",") {
		k, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return err
		}
		ring = append(ring, k)
	}
	port, _ := strconv.Atoi(os.Getenv("FORGER_PORT"))
	if port == 0 {
		port = 7946
	}
	g, err := gossip.Start(gossip.Config{Name: os.Getenv("FORGER_NAME"), BindPort: port, AdvertiseAddr: os.Getenv("FORGER_ADVERTISE"),
		Keyring: ring, Identity: id, Verify: func(string) (ed25519.PublicKey, bool) { return nil, false },
		Join: []string{os.Getenv("FORGER_JOIN")}})
	if err != nil {
		return err
	}
	if err := g.Publish([]byte(os.Getenv("FORGER_REPORT"))); err != nil {
		return err
	}
	fmt.Println("forger: joined and published")
	for {
		time.Sleep(time.Hour)
	}
}
