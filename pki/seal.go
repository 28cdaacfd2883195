package pki

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DefaultSealKeyFile is where a node's seal key is kept unless --seal-key or MESHD_SEAL_KEY say
// otherwise: outside the data dir, so a copy of the data dir opens no secret.
const DefaultSealKeyFile = "/etc/meshd/seal.key"

// SealKeyEnv names the environment variable that overrides DefaultSealKeyFile.
const SealKeyEnv = "MESHD_SEAL_KEY"

// SealKeySize is the seal key's length: an AES-256 key.
const SealKeySize = 32

// sealMagic starts every sealed file; the key's ID follows, so a wrong key is told apart from a
// damaged file.
var sealMagic = []byte("MESHD-SEALED-1\n")

// ErrWrongSealKey says a sealed file was sealed under another seal key.
var ErrWrongSealKey = errors.New("wrong seal key")

// SealKey is the key every secret of a node is sealed under.
type SealKey struct {
	key  []byte
	Path string
	// aead is the key's AES-256-GCM, made once: the record seals every Raft entry with it.
	// It holds no state between calls, so it is used from many goroutines at once.
	aead cipher.AEAD
	id   []byte
}

// newSealKey is the seal key k kept at path.
func newSealKey(k []byte, path string) *SealKey {
	b, err := aes.NewCipher(k)
	if err != nil {
		panic(err)
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(append([]byte("meshd seal key id"), k...))
	return &SealKey{key: k, Path: path, aead: g, id: sum[:8]}
}

// NewSealKey makes a new random seal key, to be written to path.
func NewSealKey(path string) *SealKey {
	k := make([]byte, SealKeySize)
	if _, err := rand.Read(k); err != nil {
		panic(err)
	}
	return newSealKey(k, path)
}

// SealKeyPath is the seal key file to use: flag, else MESHD_SEAL_KEY, else the default.
func SealKeyPath(flag string) string {
	if flag != "" {
		return flag
	}
	if e := os.Getenv(SealKeyEnv); e != "" {
		return e
	}
	return DefaultSealKeyFile
}

// ReadSealKey reads the seal key file.
func ReadSealKey(path string) (*SealKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("seal key %s: %w", path, err)
	}
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != SealKeySize {
		return nil, fmt.Errorf("seal key %s is not a meshd seal key (%d base64 bytes)", path, SealKeySize)
	}
	return newSealKey(k, path), nil
}

// Write writes the seal key to its file, 0600, in a directory made 0700 if it is new. An existing
// file is replaced.
func (k *SealKey) Write() error {
	if err := os.MkdirAll(filepath.Dir(k.Path), 0o700); err != nil {
		return fmt.Errorf("seal key dir %s: %w", filepath.Dir(k.Path), err)
	}
	return WriteFileAtomic(k.Path, []byte(base64.StdEncoding.EncodeToString(k.key)+"\n"), 0o600)
}

// ID is a short public name of the key: the first 8 bytes of its SHA-256.
func (k *SealKey) ID() []byte { return append([]byte{}, k.id...) }

// Seal encrypts plain for a purpose (the file's role, such as "ca.key"); the purpose is
// authenticated, so one sealed file cannot stand in for another.
func (k *SealKey) Seal(purpose string, plain []byte) []byte {
	gcm := k.gcm()
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(err)
	}
	head := append(append([]byte{}, sealMagic...), k.ID()...)
	out := append(head, nonce...)
	return gcm.Seal(out, nonce, plain, append(head, purpose...))
}

// Open decrypts what Seal sealed for the same purpose.
func (k *SealKey) Open(purpose string, sealed []byte) ([]byte, error) {
	gcm := k.gcm()
	hl := len(sealMagic) + 8
	if len(sealed) < hl+gcm.NonceSize()+gcm.Overhead() || !bytes.Equal(sealed[:len(sealMagic)], sealMagic) {
		return nil, errors.New("not a meshd sealed file")
	}
	if !bytes.Equal(sealed[len(sealMagic):hl], k.ID()) {
		return nil, ErrWrongSealKey
	}
	head := sealed[:hl]
	nonce := sealed[hl : hl+gcm.NonceSize()]
	plain, err := gcm.Open(nil, nonce, sealed[hl+gcm.NonceSize():], append(append([]byte{}, head...), purpose...))
	if err != nil {
		return nil, fmt.Errorf("sealed for another purpose than %s, or damaged: %w", purpose, err)
	}
	return plain, nil
}

func (k *SealKey) gcm() cipher.AEAD { return k.aead }

// WriteSealed seals plain and writes it to path, 0600.
func (k *SealKey) WriteSealed(path, purpose string, plain []byte) error {
	if err := WriteFileAtomic(path, k.Seal(purpose, plain), 0o600); err != nil {
		return fmt.Errorf("write sealed %s: %w", path, err)
	}
	return nil
}

// ReadSealed reads and opens a sealed file. A file sealed under another key is refused naming
// both files; its error wraps ErrWrongSealKey.
func (k *SealKey) ReadSealed(path, purpose string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sealed %s: %w", path, err)
	}
	plain, err := k.Open(purpose, b)
	if errors.Is(err, ErrWrongSealKey) {
		return nil, fmt.Errorf("%s was sealed under another seal key than %s: %w", path, k.Path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return plain, nil
}

// recoveryPrefix starts every recovery code.
const recoveryPrefix = "MESHD"

var recoveryEnc = base32.StdEncoding.WithPadding(base32.NoPadding)

// RecoveryCode is the seal key written for a person: the key and a checksum in base32, in groups
// of eight. It is printed once, when the key is made; kept offline, it restores a lost key file.
func (k *SealKey) RecoveryCode() string {
	sum := sha256.Sum256(k.key)
	s := recoveryEnc.EncodeToString(append(append([]byte{}, k.key...), sum[:3]...))
	groups := []string{recoveryPrefix}
	for len(s) > 0 {
		n := min(8, len(s))
		groups = append(groups, s[:n])
		s = s[n:]
	}
	return strings.Join(groups, "-")
}

// SealKeyFromRecoveryCode reads a recovery code back into the seal key for path, refusing a code
// mistyped (its checksum does not match).
func SealKeyFromRecoveryCode(code, path string) (*SealKey, error) {
	s := strings.ToUpper(strings.Join(strings.FieldsFunc(code, func(r rune) bool { return r == '-' || r == ' ' }), ""))
	s = strings.TrimPrefix(s, recoveryPrefix)
	b, err := recoveryEnc.DecodeString(s)
	if err != nil || len(b) != SealKeySize+3 {
		return nil, errors.New("the recovery code is not one meshd printed (wrong length or characters)")
	}
	sum := sha256.Sum256(b[:SealKeySize])
	if !bytes.Equal(sum[:3], b[SealKeySize:]) {
		return nil, errors.New("the recovery code's checksum does not match: a character is mistyped")
	}
	return newSealKey(b[:SealKeySize], path), nil
}

// Keyring is the gossip keyring as kept sealed: every key, the primary first.
type Keyring struct {
	Keys [][]byte `json:"keys"`
}

// GossipKeySize is a gossip key's length (AES-256, as memberlist takes it).
const GossipKeySize = 32

// NewKeyring makes a keyring of one random key.
func NewKeyring() Keyring {
	k := make([]byte, GossipKeySize)
	if _, err := rand.Read(k); err != nil {
		panic(err)
	}
	return Keyring{Keys: [][]byte{k}}
}

// MarshalKeyring and UnmarshalKeyring are the keyring's sealed form.
func MarshalKeyring(r Keyring) []byte { b, _ := json.Marshal(r); return b }

// UnmarshalKeyring reads what MarshalKeyring wrote.
func UnmarshalKeyring(b []byte) (Keyring, error) {
	var r Keyring
	if err := json.Unmarshal(b, &r); err != nil || len(r.Keys) == 0 {
		return Keyring{}, errors.New("not a gossip keyring")
	}
	return r, nil
}

// WriteFileAtomic writes a file by temp file, fsync, rename and directory fsync, so a crash leaves
// either the old content or the new.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
