package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"meshd/catalogue"
	"meshd/fsm"
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
	// DryRun runs the preflight and stops: nothing is created.
	DryRun bool
	// LogOutput receives Raft's own log; nil discards it.
	LogOutput io.Writer
}

// GenesisResult says what genesis made.
type GenesisResult struct {
	Node      *fsm.Node `json:"node,omitempty"`
	DataDir   string    `json:"data_dir"`
	Advertise string    `json:"advertise"`
	// Findings are the preflight's (warnings only, when genesis went ahead).
	Findings []Finding `json:"findings"`
	DryRun   bool      `json:"dry_run,omitempty"`
}

// Genesis initialises dataDir as the control-node of a new mesh: the node's identity, a Raft
// group with this node its only voter, and the record's first entry (the node, its mode and
// settings, the catalogue, the foundation assigned). It then stops; `meshd agent` runs the node.
func Genesis(opts GenesisOptions, log *slog.Logger) (*GenesisResult, error) {
	if opts.Name == "" {
		return nil, errors.New("genesis needs the node's name (--name)")
	}
	if opts.Mode == "" {
		opts.Mode = fsm.Converged
	}
	if _, err := os.Stat(filepath.Join(opts.DataDir, nodeFileName)); err == nil {
		n, _ := ReadNodeFile(opts.DataDir)
		if n != nil {
			return nil, fmt.Errorf("%s already holds node %s (id %s); genesis runs once. Start it with `meshd agent --data-dir %s`", opts.DataDir, n.Name, n.ID, opts.DataDir)
		}
		return nil, fmt.Errorf("%s already holds a node", opts.DataDir)
	}
	if _, err := os.Stat(raftDir(opts.DataDir)); err == nil {
		return nil, fmt.Errorf("%s holds a Raft log but no node identity: an earlier genesis stopped part way. Remove %s and run genesis again", opts.DataDir, raftDir(opts.DataDir))
	}
	cat, err := catalogue.Default()
	if err != nil {
		return nil, fmt.Errorf("the shipped catalogue: %w", err)
	}
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
	findings := preflight(context.Background(), preflightInput{Mode: opts.Mode, Catalogue: cat, Settings: settings,
		Advertise: opts.Advertise, DockerHost: opts.DockerHost, Range: rng.Masked()})
	for _, f := range findings {
		if f.Level == LevelError {
			return nil, &PreflightError{Findings: findings}
		}
	}
	if opts.DryRun {
		return &GenesisResult{DataDir: opts.DataDir, Advertise: opts.Advertise, Findings: findings, DryRun: true}, nil
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", opts.DataDir, err)
	}
	nf := &NodeFile{Name: opts.Name, ID: newID(), Server: true, Advertise: opts.Advertise, RaftPort: raftPort}
	logOut := opts.LogOutput
	if logOut == nil {
		logOut = io.Discard
	}
	f := fsm.NewFSM()
	rn, err := openRaft(opts.DataDir, nf, f, logOut)
	if err != nil {
		os.RemoveAll(raftDir(opts.DataDir))
		return nil, err
	}
	fail := func(err error) (*GenesisResult, error) {
		rn.shutdown(log)
		os.RemoveAll(raftDir(opts.DataDir))
		return nil, err
	}
	boot := raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(nf.ID), Address: rn.transport.LocalAddr()}}}
	if err := rn.raft.BootstrapCluster(boot).Error(); err != nil {
		return fail(fmt.Errorf("bootstrap raft: %w", err))
	}
	if err := rn.waitLeader(15 * time.Second); err != nil {
		return fail(err)
	}
	v, err := rn.apply(fsm.OpGenesis, fsm.Genesis{Node: opts.Name, ID: nf.ID, Mode: opts.Mode, Advertise: opts.Advertise,
		Settings: settings, Catalogue: catalogue.DefaultSources(), Assign: foundation}, 10*time.Second)
	if err != nil {
		return fail(err)
	}
	if err := rn.raft.Snapshot().Error(); err != nil {
		log.Warn("genesis snapshot", "err", err)
	}
	rn.shutdown(log)
	if err := writeNodeFile(opts.DataDir, nf); err != nil {
		return nil, fmt.Errorf("write node identity: %w", err)
	}
	return &GenesisResult{Node: v.(*fsm.Node), DataDir: opts.DataDir, Advertise: opts.Advertise, Findings: findings}, nil
}

func cutModule(key, module string) (string, bool) {
	if len(key) > len(module)+1 && key[:len(module)+1] == module+"." {
		return key[len(module)+1:], true
	}
	return "", false
}
