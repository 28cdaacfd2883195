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
// fsync'd before the call returns.
type store struct {
	db   *bolt.DB
	path string
	// updates counts committed write transactions, so a test can prove a no-op pass wrote none.
	updates atomic.Uint64
}

func openStore(path string) (*store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("record store %s: held by another process (is another agent running?): %w", path, err)
		}
		return nil, fmt.Errorf("record store %s: %w", path, err)
	}
	s := &store{db: db, path: path}
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
	err = s.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketOriginals).Put([]byte(path), original); err != nil {
			return err
		}
		return tx.Bucket(bucketFound).Put([]byte(path), meta)
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
	err = s.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketLatest).Put([]byte(path), latest); err != nil {
			return err
		}
		return tx.Bucket(bucketFound).Put([]byte(path), meta)
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
		if v := tx.Bucket(bucketLatest).Get([]byte(path)); v != nil {
			out, ok = append([]byte{}, v...), true
		}
		return nil
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
	if err := s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketWritten).Put([]byte(path), v) }); err != nil {
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
		if v := tx.Bucket(bucketOriginals).Get([]byte(path)); v != nil {
			out = append([]byte{}, v...)
			ok = true
		}
		return nil
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
