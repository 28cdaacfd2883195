package pass

import (
	"fmt"
	"sort"

	bolt "go.etcd.io/bbolt"
)

// Records is a driver's own durable memory in the record store: keys and values of its choosing,
// kept in a bucket named after its kind, each value sealed (the store's seal). A driver uses it to tell what it created from what it
// found, the way the file driver does with its written and found records.
type Records struct {
	s      Store
	bucket []byte
	kind   []byte
}

// Store is what Records needs of the record store (the host's): its database, its path for
// errors, its write transaction, which commits with an fsync before it returns, and the seal
// every value is kept under (where is the bucket's path, "drivers/container").
type Store interface {
	DB() *bolt.DB
	Path() string
	Update(fn func(tx *bolt.Tx) error) error
	Seal(where, key string, v []byte) []byte
	Open(where, key string, v []byte) ([]byte, error)
}

// NewRecords is the records of kind, kept in st under the bucket named bucket.
func NewRecords(st Store, bucket []byte, kind string) *Records {
	return &Records{s: st, bucket: bucket, kind: []byte(kind)}
}

// where is the records' bucket path, which each value is sealed for with its key.
func (r *Records) where() string { return string(r.bucket) + "/" + string(r.kind) }

// Get returns the value under key, and whether there is one.
func (r *Records) Get(key string) ([]byte, bool, error) {
	var out []byte
	ok := false
	err := r.s.DB().View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(r.bucket).Bucket(r.kind); b != nil {
			if v := b.Get([]byte(key)); v != nil {
				var err error
				out, err = r.s.Open(r.where(), key, v)
				ok = err == nil
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("record store %s: %s record %s: %w", r.s.Path(), r.kind, key, err)
	}
	return out, ok, nil
}

// Keys lists every key, sorted.
func (r *Records) Keys() ([]string, error) {
	var keys []string
	err := r.s.DB().View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(r.bucket).Bucket(r.kind); b != nil {
			return b.ForEach(func(k, _ []byte) error { keys = append(keys, string(k)); return nil })
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record store %s: %s records: %w", r.s.Path(), r.kind, err)
	}
	sort.Strings(keys)
	return keys, nil
}

// Put stores value under key, durably (committed and fsync'd) before it returns.
func (r *Records) Put(key string, value []byte) error {
	err := r.s.Update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(r.bucket).CreateBucketIfNotExists(r.kind)
		if err != nil {
			return err
		}
		return b.Put([]byte(key), r.s.Seal(r.where(), key, value))
	})
	if err != nil {
		return fmt.Errorf("record store %s: %s record %s: %w", r.s.Path(), r.kind, key, err)
	}
	return nil
}

// Delete drops key; dropping a key that is not there writes nothing.
func (r *Records) Delete(key string) error {
	if _, ok, err := r.Get(key); err != nil || !ok {
		return err
	}
	err := r.s.Update(func(tx *bolt.Tx) error {
		if b := tx.Bucket(r.bucket).Bucket(r.kind); b != nil {
			return b.Delete([]byte(key))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record store %s: %s record %s: %w", r.s.Path(), r.kind, key, err)
	}
	return nil
}
