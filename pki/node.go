package pki

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The files a node keeps under DATA_DIR/pki. Certificates are public; every *.sealed file is a
// secret sealed under the node's seal key, and every file here is 0600.
const (
	Subdir          = "pki"
	CACertFile      = "ca.crt"
	CAKeyFile       = "ca.key.sealed"
	NodeCertFile    = "node.crt"
	NodeKeyFile     = "node.key.sealed"
	GossipKeyFile   = "gossip.keyring.sealed"
	purposeCAKey    = "ca.key"
	purposeNodeKey  = "node.key"
	purposeKeyring  = "gossip.keyring"
	restoreTemplate = "meshd operator seal-key restore --recovery-code-file - --seal-key %s --data-dir %s (then type the recovery code)"
)

// Path is a pki file's path in dataDir.
func Path(dataDir, file string) string { return filepath.Join(dataDir, Subdir, file) }

// NodeSecrets is everything a node's agent needs from its pki dir, unsealed.
type NodeSecrets struct {
	NodeKey     ed25519.PrivateKey
	NodeCertPEM []byte
	CACertPEM   []byte
	Keyring     Keyring
	// CA is the mesh CA with its key, on servers only (nil on a client).
	CA *CA
	// Seal is the seal key they were opened with, which the Raft log and the host's record
	// store are sealed under too (set by OpenNodeSecrets).
	Seal *SealKey
}

// WriteNodeSecrets writes the node's pki dir: certificates as they are, every secret sealed.
func WriteNodeSecrets(dataDir string, k *SealKey, s *NodeSecrets) error {
	dir := filepath.Join(dataDir, Subdir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for file, data := range map[string][]byte{CACertFile: s.CACertPEM, NodeCertFile: s.NodeCertPEM} {
		if err := WriteFileAtomic(Path(dataDir, file), data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", Path(dataDir, file), err)
		}
	}
	if err := k.WriteSealed(Path(dataDir, NodeKeyFile), purposeNodeKey, s.NodeKey); err != nil {
		return err
	}
	if err := k.WriteSealed(Path(dataDir, GossipKeyFile), purposeKeyring, MarshalKeyring(s.Keyring)); err != nil {
		return err
	}
	if s.CA != nil {
		if err := k.WriteSealed(Path(dataDir, CAKeyFile), purposeCAKey, s.CA.Key); err != nil {
			return err
		}
	}
	return nil
}

// SealError is a node whose secrets cannot be unsealed: the seal key file is missing, not a seal
// key, or not the key the node was sealed with. It names the file and the recovery command.
type SealError struct {
	KeyFile, DataDir string
	Err              error
}

func (e *SealError) Error() string {
	return fmt.Sprintf("cannot unseal the node's secrets in %s with seal key %s: %v; if the seal key file was lost or replaced, restore it from the recovery code printed when it was made: %s",
		filepath.Join(e.DataDir, Subdir), e.KeyFile, e.Err, fmt.Sprintf(restoreTemplate, e.KeyFile, e.DataDir))
}

func (e *SealError) Unwrap() error { return e.Err }

// OpenNodeSecrets reads the seal key at keyFile and unseals the node's secrets in dataDir.
func OpenNodeSecrets(dataDir, keyFile string) (*NodeSecrets, error) {
	k, err := ReadSealKey(keyFile)
	if err != nil {
		return nil, &SealError{KeyFile: keyFile, DataDir: dataDir, Err: err}
	}
	s, err := openWith(dataDir, k)
	if errors.Is(err, ErrWrongSealKey) {
		return nil, &SealError{KeyFile: keyFile, DataDir: dataDir, Err: err}
	}
	return s, err
}

func openWith(dataDir string, k *SealKey) (*NodeSecrets, error) {
	s := &NodeSecrets{Seal: k}
	var err error
	if _, err := os.Stat(filepath.Join(dataDir, Subdir)); err != nil {
		return nil, fmt.Errorf("%s holds no node keys (%w): was the node made by `meshd genesis` or `meshd join`?", filepath.Join(dataDir, Subdir), err)
	}
	key, err := k.ReadSealed(Path(dataDir, NodeKeyFile), purposeNodeKey)
	if err != nil {
		return nil, err
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%s: not an ed25519 key", Path(dataDir, NodeKeyFile))
	}
	s.NodeKey = ed25519.PrivateKey(key)
	if s.NodeCertPEM, err = os.ReadFile(Path(dataDir, NodeCertFile)); err != nil {
		return nil, fmt.Errorf("node certificate: %w", err)
	}
	if s.CACertPEM, err = os.ReadFile(Path(dataDir, CACertFile)); err != nil {
		return nil, fmt.Errorf("mesh CA certificate: %w", err)
	}
	ring, err := k.ReadSealed(Path(dataDir, GossipKeyFile), purposeKeyring)
	if err != nil {
		return nil, err
	}
	if s.Keyring, err = UnmarshalKeyring(ring); err != nil {
		return nil, fmt.Errorf("%s: %w", Path(dataDir, GossipKeyFile), err)
	}
	caKey, err := k.ReadSealed(Path(dataDir, CAKeyFile), purposeCAKey)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if s.CA, err = LoadCA(s.CACertPEM, ed25519.PrivateKey(caKey)); err != nil {
			return nil, fmt.Errorf("%s: %w", Path(dataDir, CAKeyFile), err)
		}
	}
	return s, nil
}

// RestoreSealKey writes the seal key a recovery code holds to keyFile, once the code is shown to
// open the node's secrets in dataDir. An existing key file that already opens them is left alone.
func RestoreSealKey(code, keyFile, dataDir string) error {
	k, err := SealKeyFromRecoveryCode(code, keyFile)
	if err != nil {
		return err
	}
	if _, err := openWith(dataDir, k); err != nil {
		if errors.Is(err, ErrWrongSealKey) {
			return fmt.Errorf("the recovery code is not the one for the node in %s (its secrets were sealed under another key)", dataDir)
		}
		return err
	}
	if cur, err := ReadSealKey(keyFile); err == nil {
		if _, err := openWith(dataDir, cur); err == nil {
			return fmt.Errorf("seal key %s already opens the node in %s; nothing to restore", keyFile, dataDir)
		}
	}
	return k.Write()
}

// WriteKeyring replaces the node's sealed gossip keyring (a rotation), sealed under the seal key
// at keyFile.
func WriteKeyring(dataDir, keyFile string, r Keyring) error {
	if len(r.Keys) == 0 {
		return errors.New("a gossip keyring needs at least one key")
	}
	k, err := ReadSealKey(keyFile)
	if err != nil {
		return &SealError{KeyFile: keyFile, DataDir: dataDir, Err: err}
	}
	if _, err := openWith(dataDir, k); err != nil {
		if errors.Is(err, ErrWrongSealKey) {
			return &SealError{KeyFile: keyFile, DataDir: dataDir, Err: err}
		}
		return err
	}
	return k.WriteSealed(Path(dataDir, GossipKeyFile), purposeKeyring, MarshalKeyring(r))
}
