package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"meshd/host/pass"
	"meshd/pki"
)

// Buckets of the record store. Written and found are keyed by the declared path (never the root
// prefix); originals hold the found bytes apart from their metadata so that a pass, which reads
// every record, does not decode every original.
var (
	bucketWritten   = []byte("written")
	bucketFound     = []byte("found")
	bucketOriginals = []byte("originals")
	bucketLatest    = []byte("latest")
	bucketDrivers   = []byte("drivers")
)

// writtenRecord says the host wrote a path: the hash is what it wrote (or is about to write: the
// record is committed before the rename, so a file holding this hash is the host's).
type writtenRecord struct {
	Module string    `json:"module"`
	Hash   string    `json:"hash"`
	At     time.Time `json:"at"`
}

// foundRecord says a path held a file the host had no record of; its bytes are in originals.
type foundRecord struct {
	Module string    `json:"module"`
	Hash   string    `json:"hash"`
	Size   int       `json:"size"`
	At     time.Time `json:"at"`
	// Meta is the original's mode and owner (nil in records kept before they were recorded).
	Meta *fileMeta `json:"meta,omitempty"`
	// Latest is the last the host saw of the file before a take replaced it, recorded just
	// before the cutover; its bytes are in latest. It differs from the original when something
	// else changed the file while it was held.
	Latest *latestRecord `json:"latest,omitempty"`
}

// fileMeta is a file's mode (permission, setuid, setgid and sticky bits) and owner.
type fileMeta struct {
	Mode uint32 `json:"mode"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
}

// latestRecord is a held file as it was just before a take replaced it.
type latestRecord struct {
	Hash string    `json:"hash"`
	Size int       `json:"size"`
	Meta fileMeta  `json:"meta"`
	At   time.Time `json:"at"`
}

// store is the host's record store: bbolt in the data dir, every write transaction committed and
// fsync'd before the call returns. Every value is sealed under the node's seal key for its
// bucket and key (one record cannot stand in for another); the keys, declared paths and
// container names, are not.
type store struct {
	db   *bolt.DB
	path string
	seal *pki.SealKey
	// updates counts committed write transactions, so a test can prove a no-op pass wrote none.
	updates atomic.Uint64
}

// storeTimeout is how long opening the record store waits for another process holding it.
const storeTimeout = 2 * time.Second

// openStore opens the record store at path sealed under seal; a store written before the seal
// is sealed first, once (sealStore).
func openStore(path string, seal *pki.SealKey) (*store, error) {
	if seal == nil {
		return nil, fmt.Errorf("record store %s: no seal key", path)
	}
	sealed, err := pki.BoltSealed(path, storeTimeout)
	if err == nil && !sealed {
		err = sealStore(path, seal)
	}
	if err != nil {
		return nil, storeOpenError(path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: storeTimeout})
	if err != nil {
		return nil, storeOpenError(path, err)
	}
	s := &store{db: db, path: path, seal: seal}
	if err := s.opens(); err != nil {
		db.Close()
		return nil, fmt.Errorf("record store %s: %w", path, err)
	}
	missing := false
	_ = db.View(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketWritten, bucketFound, bucketOriginals, bucketLatest, bucketDrivers} {
			if tx.Bucket(b) == nil {
				missing = true
			}
		}
		return nil
	})
	if missing {
		err = s.update(func(tx *bolt.Tx) error {
			for _, b := range [][]byte{bucketWritten, bucketFound, bucketOriginals, bucketLatest, bucketDrivers} {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("record store %s: creating buckets: %w", path, err)
		}
	}
	return s, nil
}

func storeOpenError(path string, err error) error {
	if errors.Is(err, bolterrors.ErrTimeout) {
		return fmt.Errorf("record store %s: held by another process (is another agent running?): %w", path, err)
	}
	return fmt.Errorf("record store %s: %w", path, err)
}

// sealStore seals in place every value of a record store written before the seal (one already
// sealed, by a sealing a crash cut short, is left), then rewrites the file marked sealed.
func sealStore(path string, seal *pki.SealKey) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: storeTimeout})
	if err != nil {
		return err
	}
	s := &store{db: db, path: path, seal: seal}
	var walk func(b *bolt.Bucket, where string) error
	walk = func(b *bolt.Bucket, where string) error {
		type kv struct{ k, v []byte }
		var plain []kv
		var nested [][]byte
		if err := b.ForEach(func(k, v []byte) error {
			switch {
			case v == nil:
				nested = append(nested, append([]byte{}, k...))
			case !pki.IsSealed(v):
				plain = append(plain, kv{append([]byte{}, k...), s.sealValue(where, k, v)})
			}
			return nil
		}); err != nil {
			return err
		}
		for _, e := range plain {
			if err := b.Put(e.k, e.v); err != nil {
				return err
			}
		}
		for _, k := range nested {
			if err := walk(b.Bucket(k), where+"/"+string(k)); err != nil {
				return err
			}
		}
		return nil
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error { return walk(b, string(name)) })
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sealing what it kept in clear: %w", err)
	}
	return pki.RewriteSealed(path, storeTimeout)
}

// opens says whether the first value of the store opens under its seal key, so that a wrong
// key is named when the store opens rather than on each record a pass reads.
func (s *store) opens() error {
	var err error
	_ = s.db.View(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketWritten, bucketFound} {
			b := tx.Bucket(name)
			if b == nil {
				continue
			}
			if k, v := b.Cursor().First(); k != nil {
				if _, oerr := s.openValue(string(name), k, v); errors.Is(oerr, pki.ErrWrongSealKey) {
					err = fmt.Errorf("it was sealed under another seal key than %s: %w", s.seal.Path, oerr)
				}
				return nil
			}
		}
		return nil
	})
	return err
}

// sealValue seals a value kept under key in the bucket where ("originals", "drivers/container").
func (s *store) sealValue(where string, key, v []byte) []byte {
	return s.seal.Seal(valuePurpose(where, key), v)
}

// openValue opens what sealValue sealed.
func (s *store) openValue(where string, key, v []byte) ([]byte, error) {
	plain, err := s.seal.Open(valuePurpose(where, key), v)
	if err != nil {
		return nil, fmt.Errorf("%s record %s: %w", where, key, err)
	}
	return plain, nil
}

func valuePurpose(where string, key []byte) string { return "host.db " + where + " " + string(key) }

// Seal and Open are sealValue and openValue for pass.Records.
func (s *store) Seal(where, key string, v []byte) []byte { return s.sealValue(where, []byte(key), v) }
func (s *store) Open(where, key string, v []byte) ([]byte, error) {
	return s.openValue(where, []byte(key), v)
}

func (s *store) close() error { return s.db.Close() }

// update runs one write transaction; bbolt commits it with an fsync before returning.
func (s *store) update(fn func(tx *bolt.Tx) error) error {
	err := s.db.Update(fn)
	if err == nil {
		s.updates.Add(1)
	}
	return err
}

// records reads every written and found record in one read-only transaction.
func (s *store) records() (map[string]writtenRecord, map[string]foundRecord, error) {
	written := map[string]writtenRecord{}
	found := map[string]foundRecord{}
	err := s.db.View(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketWritten).ForEach(func(k, v []byte) error {
			var r writtenRecord
			v, err := s.openValue("written", k, v)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("written record %s: %w", k, err)
			}
			written[string(k)] = r
			return nil
		}); err != nil {
			return err
		}
		return tx.Bucket(bucketFound).ForEach(func(k, v []byte) error {
			var r foundRecord
			v, err := s.openValue("found", k, v)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("found record %s: %w", k, err)
			}
			found[string(k)] = r
			return nil
		})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("record store %s: %w", s.path, err)
	}
	return written, found, nil
}

// putFound records a found file's original and its metadata in one committed transaction.
func (s *store) putFound(path string, r foundRecord, original []byte) error {
	meta, err := json.Marshal(r)
	if err != nil {
		return err
	}
	k := []byte(path)
	err = s.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketOriginals).Put(k, s.sealValue("originals", k, original)); err != nil {
			return err
		}
		return tx.Bucket(bucketFound).Put(k, s.sealValue("found", k, meta))
	})
	if err != nil {
		return fmt.Errorf("record store %s: recording the original of %s: %w", s.path, path, err)
	}
	return nil
}

// putLatest records, in one committed transaction, a held file's bytes as a take is about to
// replace them, beside its original (r.Latest describes them).
func (s *store) putLatest(path string, r foundRecord, latest []byte) error {
	meta, err := json.Marshal(r)
	if err != nil {
		return err
	}
	k := []byte(path)
	err = s.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketLatest).Put(k, s.sealValue("latest", k, latest)); err != nil {
			return err
		}
		return tx.Bucket(bucketFound).Put(k, s.sealValue("found", k, meta))
	})
	if err != nil {
		return fmt.Errorf("record store %s: recording the latest bytes of %s before a take: %w", s.path, path, err)
	}
	return nil
}

// latest returns the bytes of path recorded just before a take replaced it.
func (s *store) latest(path string) ([]byte, bool, error) {
	var out []byte
	ok := false
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketLatest).Get([]byte(path))
		if v == nil {
			return nil
		}
		var err error
		out, err = s.openValue("latest", []byte(path), v)
		ok = err == nil
		return err
	})
	return out, ok, err
}

// found returns the found record of path.
func (s *store) found(path string) (foundRecord, bool, error) {
	var r foundRecord
	ok := false
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketFound).Get([]byte(path))
		if v == nil {
			return nil
		}
		v, err := s.openValue("found", []byte(path), v)
		if err != nil {
			return err
		}
		ok = true
		return json.Unmarshal(v, &r)
	})
	if err != nil {
		return r, false, fmt.Errorf("record store %s: found record %s: %w", s.path, path, err)
	}
	return r, ok, nil
}

func (s *store) putWritten(path string, r writtenRecord) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	k := []byte(path)
	if err := s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketWritten).Put(k, s.sealValue("written", k, v)) }); err != nil {
		return fmt.Errorf("record store %s: recording %s as written: %w", s.path, path, err)
	}
	return nil
}

func (s *store) deleteWritten(path string) error {
	if err := s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketWritten).Delete([]byte(path)) }); err != nil {
		return fmt.Errorf("record store %s: dropping the written record of %s: %w", s.path, path, err)
	}
	return nil
}

// original returns the recorded original of path.
func (s *store) original(path string) ([]byte, bool, error) {
	var out []byte
	ok := false
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketOriginals).Get([]byte(path))
		if v == nil {
			return nil
		}
		var err error
		out, err = s.openValue("originals", []byte(path), v)
		ok = err == nil
		return err
	})
	return out, ok, err
}

// storePath is where the record store lives in a data dir.
func storePath(dataDir string) string { return filepath.Join(dataDir, "host.db") }

func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	return nil
}

// DB, Path and Update are what pass.Records reads and writes through.
func (s *store) DB() *bolt.DB                            { return s.db }
func (s *store) Path() string                            { return s.path }
func (s *store) Update(fn func(tx *bolt.Tx) error) error { return s.update(fn) }

// records is the record store as the driver of kind sees it.
func (h *Host) records(kind string) *pass.Records {
	return pass.NewRecords(h.st, bucketDrivers, kind)
}

// RecordWrites counts the record store's committed write transactions since Open, so a test
// can prove a pass with nothing to do wrote none.
func (h *Host) RecordWrites() uint64 { return h.st.updates.Load() }
