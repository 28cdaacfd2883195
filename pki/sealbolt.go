package pki

// A bolt file whose values are sealed (the Raft log, the host's record store): a marker bucket
// says every value in it is sealed, and the one-time rewrite that seals a file written before
// the seal copies only its live pages into a fresh file, so no freed page keeps the old bytes.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// sealedBucket is the marker: a bolt file holding it has every value sealed.
var sealedBucket = []byte("meshd.sealed")

// IsSealed says whether b is what Seal made (by its header; Open says whether it opens).
func IsSealed(b []byte) bool { return bytes.HasPrefix(b, sealMagic) }

// BoltSealed says whether the bolt file at path is marked as holding only sealed values. A file
// that is not there is made, empty and marked: a new store is sealed from its first write.
// A file held by another process is waited for up to timeout.
func BoltSealed(path string, timeout time.Duration) (bool, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return true, markNew(path, timeout)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, ReadOnly: true})
	if err != nil {
		return false, err
	}
	defer db.Close()
	marked := false
	err = db.View(func(tx *bolt.Tx) error { marked = tx.Bucket(sealedBucket) != nil; return nil })
	return marked, err
}

func markNew(path string, timeout time.Duration) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout})
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists(sealedBucket); return err })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}

// RewriteSealed puts a fresh copy of the bolt file at path in its place, marked sealed: its
// caller has sealed every value in it. Only live pages are copied, so the bytes the values held
// before they were sealed, which bolt leaves in freed pages, are gone from the data dir. A crash
// leaves the old file (not marked, so the rewrite runs again) or the new one.
func RewriteSealed(path string, timeout time.Duration) error {
	tmp := path + ".sealing"
	_ = os.Remove(tmp) // a rewrite a crash interrupted
	src, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, ReadOnly: true})
	if err != nil {
		return fmt.Errorf("seal %s: %w", path, err)
	}
	defer src.Close()
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: timeout})
	if err != nil {
		return fmt.Errorf("seal %s: %w", path, err)
	}
	err = bolt.Compact(dst, src, 64<<20)
	if err == nil {
		err = dst.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists(sealedBucket); return err })
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("seal %s: rewriting it: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
