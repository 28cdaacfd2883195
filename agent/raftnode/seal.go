package raftnode

// The Raft log and snapshots sealed at rest under the node's seal key (pki.SealKey, AES-256-GCM):
// a copy of the data dir holds the record's commands and snapshots only sealed. Raft itself
// sees plain entries (and sends them to the other servers over mutual TLS): sealing is the
// stores', each server's under its own key.
//
// A data dir written before the seal is sealed once, when Raft opens it: every entry of the
// log is sealed in place, then the bolt file is rewritten into a fresh one marked sealed (so no
// freed page keeps an entry's old bytes), and the newest snapshot is copied sealed while the
// plain ones are removed. From then on an entry or a snapshot that is not sealed, or not under
// this key, fails to open.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"meshd/pki"
)

// sealedLog is raft-boltdb's log and stable store with each entry's data and extensions sealed,
// for the entry's index: one entry cannot stand in for another. The stable store (the current
// term, the last vote and who got it) is not secret and stays as raft-boltdb keeps it.
type sealedLog struct {
	*raftboltdb.BoltStore
	seal *pki.SealKey
}

// entryPurpose is what an entry's field is sealed for.
func entryPurpose(field string, index uint64) string {
	return "raft.log." + field + " " + strconv.FormatUint(index, 10)
}

func (s *sealedLog) sealField(field string, index uint64, b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	return s.seal.Seal(entryPurpose(field, index), b)
}

func (s *sealedLog) openField(field string, index uint64, b []byte) ([]byte, error) {
	if len(b) == 0 {
		return b, nil
	}
	plain, err := s.seal.Open(entryPurpose(field, index), b)
	if err != nil {
		return nil, fmt.Errorf("raft log entry %d: %w", index, err)
	}
	return plain, nil
}

// StoreLog stores one entry sealed.
func (s *sealedLog) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores entries sealed, in one transaction; the caller's entries are not changed.
func (s *sealedLog) StoreLogs(logs []*raft.Log) error {
	sealed := make([]*raft.Log, len(logs))
	for i, l := range logs {
		c := *l
		c.Data = s.sealField("data", c.Index, c.Data)
		c.Extensions = s.sealField("ext", c.Index, c.Extensions)
		sealed[i] = &c
	}
	return s.BoltStore.StoreLogs(sealed)
}

// GetLog reads the entry at index and opens it.
func (s *sealedLog) GetLog(index uint64, l *raft.Log) error {
	if err := s.BoltStore.GetLog(index, l); err != nil {
		return err
	}
	var err error
	if l.Data, err = s.openField("data", index, l.Data); err != nil {
		return err
	}
	l.Extensions, err = s.openField("ext", index, l.Extensions)
	return err
}

// openLog opens the Raft log at path sealed under seal, sealing first, once, a log written
// before the seal. A log another process holds is waited for up to timeout (0: for ever).
func openLog(path string, seal *pki.SealKey, timeout time.Duration) (*sealedLog, error) {
	if seal == nil {
		return nil, errors.New("raft log " + path + ": no seal key")
	}
	sealed, err := pki.BoltSealed(path, timeout)
	if err != nil {
		return nil, err
	}
	if !sealed {
		if err := sealLog(path, seal, timeout); err != nil {
			return nil, err
		}
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: timeout}})
	if err != nil {
		return nil, err
	}
	s := &sealedLog{BoltStore: store, seal: seal}
	if err := s.opens(); err != nil {
		store.Close()
		return nil, err
	}
	return s, nil
}

// opens says whether the newest entry with data opens under this seal key, so that a wrong key
// is named at the start rather than as a snapshot or an entry raft cannot read.
func (s *sealedLog) opens() error {
	first, err1 := s.FirstIndex()
	last, err2 := s.LastIndex()
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	for i := last; i >= first && i > 0; i-- {
		var l raft.Log
		if err := s.BoltStore.GetLog(i, &l); err != nil || len(l.Data) == 0 {
			continue
		}
		if _, err := s.openField("data", i, l.Data); errors.Is(err, pki.ErrWrongSealKey) {
			return fmt.Errorf("it was sealed under another seal key than %s: %w", s.seal.Path, err)
		}
		return nil
	}
	return nil
}

// sealLog seals in place every entry of a log written before the seal (an entry already sealed,
// by a sealing a crash cut short, is left), then rewrites the file marked sealed.
func sealLog(path string, seal *pki.SealKey, timeout time.Duration) error {
	raw, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: timeout}})
	if err != nil {
		return err
	}
	first, err1 := raw.FirstIndex()
	last, err2 := raw.LastIndex()
	if err := errors.Join(err1, err2); err != nil {
		raw.Close()
		return fmt.Errorf("seal raft log %s: %w", path, err)
	}
	s := &sealedLog{BoltStore: raw, seal: seal}
	var batch []*raft.Log
	flush := func() error {
		err := raw.StoreLogs(batch)
		batch = batch[:0]
		return err
	}
	for i := first; i <= last && i > 0; i++ {
		l := new(raft.Log)
		if err := raw.GetLog(i, l); errors.Is(err, raft.ErrLogNotFound) {
			continue
		} else if err != nil {
			raw.Close()
			return fmt.Errorf("seal raft log %s: entry %d: %w", path, i, err)
		}
		if !pki.IsSealed(l.Data) {
			l.Data = s.sealField("data", i, l.Data)
		}
		if !pki.IsSealed(l.Extensions) {
			l.Extensions = s.sealField("ext", i, l.Extensions)
		}
		if batch = append(batch, l); len(batch) == 512 {
			if err := flush(); err != nil {
				raw.Close()
				return fmt.Errorf("seal raft log %s: %w", path, err)
			}
		}
	}
	if err := flush(); err != nil {
		raw.Close()
		return fmt.Errorf("seal raft log %s: %w", path, err)
	}
	if err := raw.Close(); err != nil {
		return err
	}
	return pki.RewriteSealed(path, timeout)
}

// sealedSnapshots is raft's file snapshot store with each snapshot's state sealed for its ID.
// A snapshot is sealed whole when its sink closes (the record's snapshot is held in memory
// while it is written, as the record marshals it whole anyway); its meta.json (index, term,
// the servers' IDs and addresses) is not secret and stays as raft writes it.
type sealedSnapshots struct {
	*raft.FileSnapshotStore
	seal *pki.SealKey
}

func snapshotPurpose(id string) string { return "raft.snapshot " + id }

// Create starts a snapshot that is sealed when its sink closes.
func (s *sealedSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &sealingSink{SnapshotSink: sink, seal: s.seal}, nil
}

// Open opens snapshot id; its meta's Size is the opened state's, which raft sends a follower.
func (s *sealedSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.FileSnapshotStore.Open(id)
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("raft snapshot %s: %w", id, err)
	}
	plain, err := s.seal.Open(snapshotPurpose(id), b)
	if err != nil {
		return nil, nil, fmt.Errorf("raft snapshot %s: %w", id, err)
	}
	m := *meta
	m.Size = int64(len(plain))
	return &m, io.NopCloser(bytes.NewReader(plain)), nil
}

// sealingSink holds a snapshot's state until Close seals it into raft's file sink.
type sealingSink struct {
	raft.SnapshotSink
	seal   *pki.SealKey
	buf    bytes.Buffer
	closed bool
}

func (k *sealingSink) Write(p []byte) (int, error) { return k.buf.Write(p) }

// Close seals what was written into the file sink and closes it; closed again (raft's recovery
// closes a sink the record's Persist closed), it is the file sink's to answer.
func (k *sealingSink) Close() error {
	if k.closed {
		return k.SnapshotSink.Close()
	}
	k.closed = true
	if _, err := k.SnapshotSink.Write(k.seal.Seal(snapshotPurpose(k.ID()), k.buf.Bytes())); err != nil {
		_ = k.SnapshotSink.Cancel()
		return err
	}
	return k.SnapshotSink.Close()
}

// openSnapshots opens the snapshots in dir sealed under seal. Snapshots written before the seal
// are sealed once: the newest is copied sealed and every plain one removed (raft restores the
// newest it can open; the older are kept only as fallbacks).
func openSnapshots(dir string, seal *pki.SealKey, logOut io.Writer) (*sealedSnapshots, error) {
	files, err := raft.NewFileSnapshotStore(dir, 3, logOut)
	if err != nil {
		return nil, err
	}
	s := &sealedSnapshots{FileSnapshotStore: files, seal: seal}
	metas, err := files.List()
	if err != nil {
		return nil, err
	}
	var plain []string
	for i, m := range metas {
		isPlain, err := plainSnapshot(files, m.ID)
		if err != nil || !isPlain {
			continue // a damaged snapshot is raft's to skip, as before
		}
		if i == 0 {
			if err := s.copySealed(m.ID); err != nil {
				return nil, fmt.Errorf("seal raft snapshot %s: %w", m.ID, err)
			}
		}
		plain = append(plain, m.ID)
	}
	for _, id := range plain {
		// raft's file store keeps each snapshot in snapshots/ID.
		if err := os.RemoveAll(filepath.Join(dir, "snapshots", id)); err != nil {
			return nil, fmt.Errorf("remove plain raft snapshot %s: %w", id, err)
		}
	}
	return s, nil
}

// plainSnapshot says whether the snapshot id was written before the seal.
func plainSnapshot(files *raft.FileSnapshotStore, id string) (bool, error) {
	_, rc, err := files.Open(id)
	if err != nil {
		return false, err
	}
	defer rc.Close()
	head := make([]byte, 64)
	n, _ := io.ReadFull(rc, head)
	return !pki.IsSealed(head[:n]), nil
}

// copySealed writes a sealed copy of the plain snapshot id (at the same index and term: raft
// takes the copy, whose ID is newer, as the newest).
func (s *sealedSnapshots) copySealed(id string) error {
	meta, rc, err := s.FileSnapshotStore.Open(id)
	if err != nil {
		return err
	}
	defer rc.Close()
	// The transport only encodes the legacy peer list: the inmem one as the network one does.
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	sink, err := s.Create(meta.Version, meta.Index, meta.Term, meta.Configuration, meta.ConfigurationIndex, trans)
	if err != nil {
		return err
	}
	if _, err := io.Copy(sink, rc); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}
