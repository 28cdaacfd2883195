package setup

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"meshd/agent/raftnode"
	"meshd/api"
	"meshd/catalogue"
	"meshd/fsm"
	"meshd/host/tunnel"
	"meshd/pki"
	"meshd/report"
)

// GenesisOptions are genesis's inputs.
type GenesisOptions struct {
	DataDir string
	Name    string
	Mode    fsm.Mode
	// Ports are `--port KEY=N` as given: KEY is a foundation port's name (registry, bus, ...) or
	// MODULE.SETTING.
	Ports map[string]string
	// Images are `--image MODULE=REF`.
	Images map[string]string
	// Settings are any other `--set MODULE.SETTING=VALUE`.
	Settings  map[string]string
	Advertise string
	// DockerHost is the Docker engine the preflight asks for published ports.
	DockerHost string
	// SealKey is the seal key file (empty: MESHD_SEAL_KEY, else /etc/meshd/seal.key). A file
	// already there is used; otherwise a new key is made and its recovery code returned once.
	SealKey string
	// TakeTunnel names a found WireGuard interface the control-node takes over in place
	// (ADR 0105): its port becomes mesh.tunnel, its range the record's, its peers are carried.
	TakeTunnel string
	// DryRun runs the preflight and stops: nothing is created.
	DryRun bool
	// LogOutput receives Raft's own log; nil discards it.
	LogOutput io.Writer
	// Progress, when set, is told each step as it starts (the CLI shows them).
	Progress func(step string)
}

// GenesisResult says what genesis made.
type GenesisResult struct {
	Node      *fsm.Node `json:"node,omitempty"`
	DataDir   string    `json:"data_dir"`
	Advertise string    `json:"advertise"`
	// Findings are the preflight's (warnings only, when genesis went ahead).
	Findings []api.Finding `json:"findings"`
	DryRun   bool          `json:"dry_run,omitempty"`
	// Tunnel is the found interface taken over (or presented) beside what the mesh raises in
	// its place, field by field (TunnelPreview); empty without a found tunnel.
	Tunnel []report.TunnelField `json:"tunnel,omitempty"`
	// SealKey is the seal key file the node's secrets are sealed under.
	SealKey string `json:"seal_key,omitempty"`
	// RecoveryCode restores a lost seal key file; set only when genesis made the key, and shown
	// this once.
	RecoveryCode string `json:"recovery_code,omitempty"`
	// CAFingerprint names the mesh CA made at genesis.
	CAFingerprint string `json:"ca_fingerprint,omitempty"`
}

// Genesis initialises dataDir as the control-node of a new mesh: the node's identity, a Raft
// group with this node its only voter, and the record's first entry (the node, its mode and
// settings, the catalogue, the foundation assigned). It then stops; `meshd agent` runs the node.
//
// It is long on purpose: it is the one sequence that writes a new mesh to disk, in order (checks,
// seal key, secrets, Raft bootstrap, first entry, node file last), and each failure undoes exactly
// what the steps before it wrote, which reads best as one body.
func Genesis(opts GenesisOptions, log *slog.Logger) (*GenesisResult, error) {
	if opts.Name == "" {
		return nil, errors.New("genesis needs the node's name (--name)")
	}
	if opts.Mode == "" {
		opts.Mode = fsm.Converged
	}
	if _, err := os.Stat(filepath.Join(opts.DataDir, NodeFileName)); err == nil {
		n, _ := ReadNodeFile(opts.DataDir)
		if n != nil {
			return nil, fmt.Errorf("%s already holds node %s (id %s); genesis runs once. Start it with `meshd agent --data-dir %s`", opts.DataDir, n.Name, n.ID, opts.DataDir)
		}
		return nil, fmt.Errorf("%s already holds a node", opts.DataDir)
	}
	if _, err := os.Stat(raftnode.Dir(opts.DataDir)); err == nil {
		return nil, fmt.Errorf("%s holds a Raft log but no node identity: an earlier genesis stopped part way. Remove %s and run genesis again", opts.DataDir, raftnode.Dir(opts.DataDir))
	}
	cat, err := catalogue.Default()
	if err != nil {
		return nil, fmt.Errorf("the shipped catalogue: %w", err)
	}
	settings, err := genesisSettings(cat, opts)
	if err != nil {
		return nil, err
	}
	var take *fsm.TunnelTake
	if opts.TakeTunnel != "" {
		if take, err = genesisTake(opts, settings); err != nil {
			// Not on this machine (a container's), or unreadable: what manages it says why.
			if fs := tunnelManagerFindings(context.Background(), opts.TakeTunnel, settings, opts.DockerHost); hasError(fs) {
				return nil, &PreflightError{Findings: fs}
			}
			return nil, err
		}
		settings[catalogue.MeshModule+".tunnel"] = strconv.Itoa(int(take.Port))
		settings[catalogue.MeshModule+".range"] = netip.MustParsePrefix(take.Address).Masked().String()
	}
	mesh := cat[catalogue.MeshModule]
	vals := map[string]string{}
	for k, v := range settings {
		if s, ok := cutModule(k, catalogue.MeshModule); ok {
			vals[s] = v
		}
	}
	raftPort, err := catalogue.ParsePort(mesh.Values(vals)["raft"])
	if err != nil {
		return nil, fmt.Errorf("setting mesh.raft: %w", err)
	}
	var foundation []string
	for _, name := range cat.Names() {
		if cat[name].Foundation {
			foundation = append(foundation, name)
		}
	}
	sort.Strings(foundation)
	if opts.Advertise == "" {
		opts.Advertise = DetectAdvertise()
	}
	rng, err := netip.ParsePrefix(mesh.Values(vals)["range"])
	if err != nil {
		return nil, fmt.Errorf("setting mesh.range: %q is not a range such as 10.99.0.0/24", mesh.Values(vals)["range"])
	}
	say := func(step string) {
		if opts.Progress != nil {
			opts.Progress(step)
		}
	}
	say("preflight: the ports, the firewall, the tunnel, the Docker engine")
	findings := preflight(context.Background(), preflightInput{Mode: opts.Mode, Catalogue: cat, Settings: settings,
		Advertise: opts.Advertise, DockerHost: opts.DockerHost, Range: rng.Masked(), TakeTunnel: opts.TakeTunnel})
	for _, f := range findings {
		if f.Level == api.LevelError {
			return nil, &PreflightError{Findings: findings}
		}
	}
	var preview []report.TunnelField
	if opts.TakeTunnel != "" {
		if preview, err = TunnelPreview(opts.TakeTunnel); err != nil {
			return nil, fmt.Errorf("--take-tunnel %s: %w", opts.TakeTunnel, err)
		}
	}
	if opts.DryRun {
		return &GenesisResult{DataDir: opts.DataDir, Advertise: opts.Advertise, Findings: findings, DryRun: true, Tunnel: preview}, nil
	}
	say("sealing the mesh's secrets: the CA, the node's identity, the gossip keyring")
	sealPath := pki.SealKeyPath(opts.SealKey)
	seal, newSeal, err := sealKeyFor(sealPath)
	if err != nil {
		return nil, err
	}
	done, err := writeNewSealKey(seal, newSeal)
	if err != nil {
		return nil, err
	}
	defer done(false)
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", opts.DataDir, err)
	}
	nf := &NodeFile{Name: opts.Name, ID: newID(), Server: true, Advertise: opts.Advertise, RaftPort: raftPort}
	// The mesh's secrets, sealed before anything else is written: the CA, the control-node's
	// identity and certificate, the gossip keyring.
	ca, err := pki.NewCA(opts.Name, time.Now())
	if err != nil {
		return nil, err
	}
	nodeKey, err := pki.NewNodeKey()
	if err != nil {
		return nil, err
	}
	nodePub := nodeKey.Public().(ed25519.PublicKey)
	nodeCert, err := ca.IssueNode(opts.Name, nodePub, pki.ServerCert, time.Now())
	if err != nil {
		return nil, err
	}
	if err := pki.WriteNodeSecrets(opts.DataDir, seal, &pki.NodeSecrets{NodeKey: nodeKey, NodeCertPEM: nodeCert,
		CACertPEM: ca.CertPEM, Keyring: pki.NewKeyring(), CA: ca}); err != nil {
		os.RemoveAll(filepath.Join(opts.DataDir, pki.Subdir))
		return nil, err
	}
	logOut := opts.LogOutput
	if logOut == nil {
		logOut = io.Discard
	}
	id, err := pki.Identity(nodeCert, ca.CertPEM, nodeKey)
	if err != nil {
		os.RemoveAll(filepath.Join(opts.DataDir, pki.Subdir))
		return nil, err
	}
	raftTLS, err := pki.RaftTLS(id, ca.Cert)
	if err != nil {
		os.RemoveAll(filepath.Join(opts.DataDir, pki.Subdir))
		return nil, err
	}
	say("starting Raft in " + raftnode.Dir(opts.DataDir))
	f := fsm.NewFSM()
	rn, err := raftnode.Open(opts.DataDir, nf.RaftSelf(), f, seal, raftTLS, log, logOut)
	if err != nil {
		os.RemoveAll(raftnode.Dir(opts.DataDir))
		return nil, err
	}
	fail := func(err error) (*GenesisResult, error) {
		rn.Shutdown(log)
		os.RemoveAll(raftnode.Dir(opts.DataDir))
		os.RemoveAll(filepath.Join(opts.DataDir, pki.Subdir))
		return nil, err
	}
	if err := rn.Bootstrap([]raft.Server{{ID: raft.ServerID(nf.ID), Address: rn.LocalAddr()}}); err != nil {
		return fail(fmt.Errorf("bootstrap raft: %w", err))
	}
	say("waiting for Raft to elect this node")
	if err := rn.WaitLeader(15 * time.Second); err != nil {
		return fail(err)
	}
	// The control-node's public key is recorded as an enrolled node's is: servers verify its
	// signed gossip reports with it.
	// Without a tunnel to take, the control-node makes its own overlay key, as a joining node
	// does: only its public half goes into the record, the private half is sealed here.
	var overlay string
	if take == nil {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return fail(fmt.Errorf("making the node's WireGuard key: %w", err))
		}
		if err := (tunnel.SealedKey{Path: tunnel.KeyPath(opts.DataDir), Seal: seal}).Save(k); err != nil {
			return fail(fmt.Errorf("the node's WireGuard key: %w", err))
		}
		overlay = k.PublicKey().String()
	}
	say("recording the node, its settings and the catalogue")
	v, err := rn.Apply(fsm.OpGenesis, fsm.Genesis{Node: opts.Name, ID: nf.ID, Mode: opts.Mode, Advertise: opts.Advertise,
		PublicKey: pki.PublicKeyString(nodePub), Settings: settings, Catalogue: catalogue.DefaultSources(), Assign: foundation, Tunnel: take,
		WireGuardKey: overlay}, 10*time.Second)
	if err != nil {
		return fail(err)
	}
	say("writing the record's first snapshot")
	if err := rn.Snapshot(); err != nil {
		log.Warn("genesis snapshot", "err", err)
	}
	rn.Shutdown(log)
	res := &GenesisResult{Node: v.(*fsm.Node), DataDir: opts.DataDir, Advertise: opts.Advertise, Findings: findings, Tunnel: preview,
		SealKey: sealPath, CAFingerprint: pki.Fingerprint(ca.Cert)}
	if newSeal {
		res.RecoveryCode = seal.RecoveryCode()
	}
	if err := WriteNodeFile(opts.DataDir, nf); err != nil {
		return nil, fmt.Errorf("write node identity: %w", err)
	}
	done(true)
	return res, nil
}

// genesisSettings resolves genesis's --set, --port and --image flags to the node's settings, keyed
// MODULE.SETTING as the record keeps them.
func genesisSettings(cat catalogue.Catalogue, opts GenesisOptions) (map[string]string, error) {
	settings := map[string]string{}
	for k, v := range opts.Settings {
		key, err := cat.SettingKey(k)
		if err != nil {
			return nil, err
		}
		settings[key] = v
	}
	for k, v := range opts.Ports {
		key, err := cat.SettingKey(k)
		if err != nil {
			return nil, fmt.Errorf("--port %s=%s: %w", k, v, err)
		}
		if _, err := catalogue.ParsePort(v); err != nil {
			return nil, fmt.Errorf("--port %s=%s: %w", k, v, err)
		}
		settings[key] = v
	}
	for k, v := range opts.Images {
		m := cat[k]
		if m == nil {
			return nil, fmt.Errorf("--image %s=%s: no module %q in the catalogue", k, v, k)
		}
		if _, ok := m.Settings["image"]; !ok {
			return nil, fmt.Errorf("--image %s=%s: module %s has no image setting", k, v, k)
		}
		settings[k+".image"] = v
	}
	return settings, nil
}

// writeNewSealKey writes a seal key just made, before anything is sealed with it: a secret sealed
// under a key that never reached its file could not be opened again. done(false), deferred,
// removes it when what it was made for did not finish, so the next attempt makes a new one and
// shows its recovery code; done(true) keeps it. A key that was already there is never touched.
func writeNewSealKey(seal *pki.SealKey, isNew bool) (done func(ok bool), err error) {
	if !isNew {
		return func(bool) {}, nil
	}
	if err := seal.Write(); err != nil {
		return nil, fmt.Errorf("write the seal key %s: %w", seal.Path, err)
	}
	finished := false
	return func(ok bool) {
		if ok {
			finished = true
		}
		if !finished {
			finished = true
			os.Remove(seal.Path)
		}
	}, nil
}

// sealKeyFor reads the seal key at path, or makes a new one (not yet written) when there is none.
func sealKeyFor(path string) (*pki.SealKey, bool, error) {
	if _, err := os.Stat(path); err == nil {
		k, err := pki.ReadSealKey(path)
		if err != nil {
			return nil, false, fmt.Errorf("%w: move it away to make a new one, or give another file with --seal-key", err)
		}
		return k, false, nil
	}
	return pki.NewSealKey(path), true, nil
}

func cutModule(key, module string) (string, bool) {
	if len(key) > len(module)+1 && key[:len(module)+1] == module+"." {
		return key[len(module)+1:], true
	}
	return "", false
}
