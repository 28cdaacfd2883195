package pass

import (
	"crypto/sha256"
	"encoding/hex"
)

// HashOf names content the way the report and the record store do.
func HashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
