package netfilter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"meshd/pki"
)

// BootTables is meshd's own table as last loaded on this machine: the guard on an adopted node,
// the derived filter on a converged one (at most one is set). A reboot loses every table in the
// kernel, and a machine's boot starts the container engine, which publishes every port of a
// container with a restart policy on every address, long before meshd's agent has made its first
// pass: for those seconds the store would be open to anyone (chaos seed 19). So the agent keeps
// what it loaded in its state dir (KeepForBoot) and `meshd boot`, run by the meshd-boot unit
// ahead of the engine, loads it again (LoadForBoot). It only ever refuses more than the found
// firewall alone would: the guard refuses, the filter is what the operator converged to.
type BootTables struct {
	Guard  *GuardSpec  `json:"guard,omitempty"`
	Filter *FilterSpec `json:"filter,omitempty"`
}

// BootFile is the name of the kept copy in Env.StateDir.
const BootFile = "boot-tables.json"

// BootPath is where KeepForBoot keeps the copy for a state dir.
func BootPath(stateDir string) string { return filepath.Join(stateDir, BootFile) }

// KeepForBoot writes t to Env.StateDir/boot-tables.json when it differs from what is there
// (nothing is written when it is the same, so a pass with nothing to do writes nothing); wrote
// says whether it wrote. Without a StateDir nothing is kept.
func KeepForBoot(env Env, t BootTables) (wrote bool, err error) {
	if env.StateDir == "" {
		return false, nil
	}
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return false, err
	}
	b = append(b, '\n')
	p := BootPath(env.StateDir)
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, b) {
		return false, nil
	}
	if err := os.MkdirAll(env.StateDir, 0o700); err != nil {
		return false, fmt.Errorf("keep meshd's tables for boot in %s: %w", p, err)
	}
	if err := pki.WriteFileAtomic(p, b, 0o600); err != nil {
		return false, fmt.Errorf("keep meshd's tables for boot in %s: %w", p, err)
	}
	return true, nil
}

// ErrNothingKept is LoadForBoot's answer on a machine where the agent never loaded a table.
var ErrNothingKept = errors.New("no table of meshd's kept for boot")

// LoadForBoot loads the table KeepForBoot kept in Env.StateDir: the guard or the derived filter,
// exactly as the agent last loaded it. It says which it loaded, naming the table; a machine
// with nothing kept answers ErrNothingKept (wrapped, naming the file).
func LoadForBoot(ctx context.Context, env Env) (string, error) {
	p := BootPath(env.StateDir)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %s does not exist", ErrNothingKept, p)
	}
	if err != nil {
		return "", err
	}
	var t BootTables
	if err := json.Unmarshal(b, &t); err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	switch {
	case t.Filter != nil:
		if _, err := LoadFilter(ctx, env, *t.Filter); err != nil {
			return "", fmt.Errorf("load the derived filter kept in %s: %w", p, err)
		}
		return fmt.Sprintf("the derived filter (table inet %s, %d openings)", FilterTable, len(t.Filter.Openings)), nil
	case t.Guard != nil:
		if _, err := Guard(ctx, env, *t.Guard); err != nil {
			return "", fmt.Errorf("load the guard kept in %s: %w", p, err)
		}
		return fmt.Sprintf("the guard (table inet %s, %d ports)", GuardTable, len(t.Guard.Ports)), nil
	}
	return "", fmt.Errorf("%w: %s holds neither the guard nor the filter", ErrNothingKept, p)
}
