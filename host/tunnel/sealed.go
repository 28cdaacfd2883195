package tunnel

// What the tunnel driver keeps on the machine, sealed under the node's seal key: the tunnel's
// private key and what a takeover kept of the found interface (wg.Kept, with the preshared keys).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"meshd/pki"
	"meshd/wg"
)

// keyStore keeps the mesh interface's private key sealed like the mesh's own secrets.
type keyStore interface {
	Load() (wgtypes.Key, bool, error)
	Save(k wgtypes.Key) error
	// LoadKept and SaveKept keep what a takeover carries beyond the record (wg.Kept): sealed,
	// since it holds the peers' preshared keys.
	LoadKept() (wg.Kept, bool, error)
	SaveKept(k wg.Kept) error
}

// SealedKey is the private key sealed under the node's seal key at DATA/pki/tunnel.key.sealed
// (0600): the only copy meshd keeps of a found interface's key. The found file is copied nowhere.
type SealedKey struct {
	Path string
	Seal *pki.SealKey
}

const keyPurpose = "meshd tunnel private key"

// KeyPath is where a node's sealed tunnel key lives.
func KeyPath(dataDir string) string { return pki.Path(dataDir, "tunnel.key.sealed") }

// Load reads and opens the sealed key; ok is false when there is none.
func (s SealedKey) Load() (wgtypes.Key, bool, error) {
	b, err := s.Seal.ReadSealed(s.Path, keyPurpose)
	if errors.Is(err, fs.ErrNotExist) {
		return wgtypes.Key{}, false, nil
	}
	if err != nil {
		return wgtypes.Key{}, false, err
	}
	k, err := wgtypes.NewKey(b)
	if err != nil {
		return wgtypes.Key{}, false, fmt.Errorf("sealed tunnel key %s: %w", s.Path, err)
	}
	return k, true, nil
}

const keptPurpose = "meshd tunnel kept found interface"

// keptPath is where the kept found interface is sealed, beside the key.
func (s SealedKey) keptPath() string {
	return filepath.Join(filepath.Dir(s.Path), "tunnel.kept.sealed")
}

// LoadKept reads and opens the kept found interface; ok is false when there is none.
func (s SealedKey) LoadKept() (wg.Kept, bool, error) {
	b, err := s.Seal.ReadSealed(s.keptPath(), keptPurpose)
	if errors.Is(err, fs.ErrNotExist) {
		return wg.Kept{}, false, nil
	}
	if err != nil {
		return wg.Kept{}, false, err
	}
	k, err := wg.ReadKept(b)
	if err != nil {
		return wg.Kept{}, false, fmt.Errorf("%s: %w", s.keptPath(), err)
	}
	return k, true, nil
}

// SaveKept seals k beside the key.
func (s SealedKey) SaveKept(k wg.Kept) error {
	b, err := json.Marshal(k)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.Path), 0o700); err != nil {
		return fmt.Errorf("sealing the kept found interface: %w", err)
	}
	return s.Seal.WriteSealed(s.keptPath(), keptPurpose, b)
}

// Save seals k at Path.
func (s SealedKey) Save(k wgtypes.Key) error {
	if err := os.MkdirAll(filepath.Dir(s.Path), 0o700); err != nil {
		return fmt.Errorf("sealing the tunnel key: %w", err)
	}
	return s.Seal.WriteSealed(s.Path, keyPurpose, k[:])
}
