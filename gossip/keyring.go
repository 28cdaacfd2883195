package gossip

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Key is one gossip key on this member's keyring.
type Key struct {
	Index   int    // position on the ring; 0 is the primary
	Primary bool   // the key this member encrypts with
	ID      string // a short fingerprint (hex of SHA-256, 8 bytes) safe to show and log
	Key     []byte // the key itself: a secret
}

// KeyID is the fingerprint shown for a key instead of the key.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// KeyringList returns the keys on this member's ring, the primary first.
func (g *Gossip) KeyringList() []Key {
	g.keyMu.Lock()
	defer g.keyMu.Unlock()
	return g.keysLocked()
}

func (g *Gossip) keysLocked() []Key {
	keys := g.ring.GetKeys()
	out := make([]Key, len(keys))
	for i, k := range keys {
		out[i] = Key{Index: i, Primary: i == 0, ID: KeyID(k), Key: bytes.Clone(k)}
	}
	return out
}

// KeyringInstall adds key to the ring: from now on this member can decrypt
// what is encrypted with it, and still encrypts with its primary. Installing
// a key already there does nothing.
//
// To rotate on a running mesh: install the new key on every member, then
// use it on every member, then remove the old one from every member. At
// each step every member can read every other one.
func (g *Gossip) KeyringInstall(key []byte) error {
	if len(key) != KeySize {
		return fmt.Errorf("gossip %s: key %s is %d bytes, want %d", g.cfg.Name, KeyID(key), len(key), KeySize)
	}
	g.keyMu.Lock()
	defer g.keyMu.Unlock()
	if err := g.ring.AddKey(bytes.Clone(key)); err != nil {
		return fmt.Errorf("gossip %s: install key %s: %w", g.cfg.Name, KeyID(key), err)
	}
	g.log.Info("gossip key installed", "key", KeyID(key))
	return nil
}

// KeyringUse makes an installed key the primary: this member encrypts with
// it from now on. Use it only once every member has it installed.
func (g *Gossip) KeyringUse(key []byte) error {
	g.keyMu.Lock()
	defer g.keyMu.Unlock()
	if g.indexLocked(key) < 0 {
		return fmt.Errorf("gossip %s: use key %s: not installed (install it first)", g.cfg.Name, KeyID(key))
	}
	if err := g.ring.UseKey(bytes.Clone(key)); err != nil {
		return fmt.Errorf("gossip %s: use key %s: %w", g.cfg.Name, KeyID(key), err)
	}
	g.log.Info("gossip key in use", "key", KeyID(key))
	return nil
}

// KeyringRemove takes a key off the ring. The primary key cannot be removed
// (this member would have nothing to encrypt with): use another one first.
func (g *Gossip) KeyringRemove(key []byte) error {
	g.keyMu.Lock()
	defer g.keyMu.Unlock()
	i := g.indexLocked(key)
	switch {
	case i < 0:
		return fmt.Errorf("gossip %s: remove key %s: not installed", g.cfg.Name, KeyID(key))
	case i == 0:
		return fmt.Errorf("gossip %s: remove key %s: it is key 0, the primary; use another key first", g.cfg.Name, KeyID(key))
	}
	// memberlist's RemoveKey shifts its key slice in place while packets may
	// be decrypted with it; re-installing the primary first gives the ring a
	// fresh slice, so only a reader that fetched the keys in between can see
	// the shift (and then only fails to decrypt that one packet).
	if err := g.ring.UseKey(g.ring.GetPrimaryKey()); err != nil {
		return fmt.Errorf("gossip %s: remove key %s (index %d): %w", g.cfg.Name, KeyID(key), i, err)
	}
	if err := g.ring.RemoveKey(key); err != nil {
		return fmt.Errorf("gossip %s: remove key %s (index %d): %w", g.cfg.Name, KeyID(key), i, err)
	}
	g.log.Info("gossip key removed", "key", KeyID(key), "index", i)
	return nil
}

func (g *Gossip) indexLocked(key []byte) int {
	for i, k := range g.ring.GetKeys() {
		if bytes.Equal(k, key) {
			return i
		}
	}
	return -1
}
