package raftnode

// Recovery of a group that lost its quorum: run on each surviving server, with its agent stopped,
// it rewrites the Raft configuration those servers hold through hashicorp/raft's RecoverCluster,
// so nobody writes a peers.json by hand.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	bolterrors "go.etcd.io/bbolt/errors"

	"meshd/fsm"
	"meshd/pki"
)

// RecoverResult says what recovery kept: the new voters, the servers dropped from the
// configuration, and how far this server's log and record reach.
type RecoverResult struct {
	Node    string   `json:"node"`
	Voters  []string `json:"voters"`
	Dropped []string `json:"dropped"`
	// LastIndex and LastTerm are the end of this server's log: every entry up to it is kept, and
	// counts as committed once the group starts again (also one that was never acknowledged).
	LastIndex uint64 `json:"last_index"`
	LastTerm  uint64 `json:"last_term"`
	// RecordIndex is the index of the last command the record holds once replayed, and Nodes the
	// nodes it names.
	RecordIndex uint64 `json:"record_index"`
	Nodes       int    `json:"nodes"`
}

// Recover rewrites the Raft configuration server n holds in dataDir so that the servers named
// in keep (node names; empty means this server alone) are the group's voters. The agent must be
// stopped: the Raft log is locked while it runs. Run it with the same keep on every surviving
// server, then start their agents: they elect a leader among themselves. One body: each step
// (lock the log, read what it holds, write the new configuration, say what was kept) needs the
// one before.
func Recover(dataDir string, n Self, seal *pki.SealKey, keep []string, logOut io.Writer) (*RecoverResult, error) {
	if logOut == nil {
		logOut = io.Discard
	}
	if !n.Server {
		return nil, fmt.Errorf("node %s is a client: it holds no Raft log to recover from; run recover on the surviving servers", n.Name)
	}
	if len(keep) == 0 {
		keep = []string{n.Name}
	}
	if !slices.Contains(keep, n.Name) {
		return nil, fmt.Errorf("--keep %s leaves out this server (%s): run recover only on the servers it keeps", strings.Join(keep, ","), n.Name)
	}
	dir := Dir(dataDir)
	path := filepath.Join(dir, "raft.db")
	store, err := openLog(path, seal, time.Second)
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("raft log %s is locked: the agent of node %s is running; stop it first (recover rewrites what it holds)", path, n.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("open raft log %s: %w", path, err)
	}
	defer store.Close()
	snaps, err := openSnapshots(dir, seal, logOut)
	if err != nil {
		return nil, fmt.Errorf("open raft snapshots in %s: %w", dir, err)
	}
	// The record as this server holds it, to name the servers by node.
	rec := fsm.NewFSM()
	if err := replay(rec, store, snaps); err != nil {
		return nil, err
	}
	res := &RecoverResult{Node: n.Name}
	var cfg raft.Configuration
	var missing []string
	rec.Read(func(r *fsm.Record, index uint64) {
		res.RecordIndex, res.Nodes = index, len(r.Nodes)
		for _, name := range keep {
			rn := r.Nodes[name]
			if rn == nil || !rn.Server {
				missing = append(missing, name)
				continue
			}
			port, err := fsm.MeshPort(r, rn, "raft")
			if err != nil || rn.Advertise == "" {
				missing = append(missing, name)
				continue
			}
			cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(rn.ID),
				Address: raft.ServerAddress(net.JoinHostPort(rn.Advertise, strconv.Itoa(int(port))))})
			res.Voters = append(res.Voters, name)
		}
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("--keep %s: this server's record holds no server named %s", strings.Join(keep, ","), strings.Join(missing, ", "))
	}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(n.Advertise))
	old, err := raft.GetConfiguration(raftConfig(n, logOut), fsm.NewFSM(), store, store, snaps, trans)
	if err != nil {
		return nil, fmt.Errorf("read the raft configuration in %s: %w", dir, err)
	}
	names := map[string]string{}
	rec.Read(func(r *fsm.Record, _ uint64) {
		for _, rn := range r.Nodes {
			names[rn.ID] = rn.Name
		}
	})
	for _, sv := range old.Servers {
		if name := OrID(names[string(sv.ID)], string(sv.ID)); !slices.Contains(res.Voters, name) {
			res.Dropped = append(res.Dropped, name)
		}
	}
	if err := raft.RecoverCluster(raftConfig(n, logOut), fsm.NewFSM(), store, store, snaps, trans, cfg); err != nil {
		return nil, fmt.Errorf("recover the raft configuration in %s: %w", dir, err)
	}
	res.LastIndex, _ = store.LastIndex()
	if metas, err := snaps.List(); err == nil && len(metas) > 0 && metas[0].Index > res.LastIndex {
		res.LastIndex, res.LastTerm = metas[0].Index, metas[0].Term
	} else if res.LastIndex > 0 {
		var l raft.Log
		if store.GetLog(res.LastIndex, &l) == nil {
			res.LastTerm = l.Term
		}
	}
	return res, nil
}

// replay restores the newest snapshot into f and applies the commands logged after it.
func replay(f *fsm.FSM, store raft.LogStore, snaps raft.SnapshotStore) error {
	var from uint64
	if metas, err := snaps.List(); err == nil && len(metas) > 0 {
		_, rc, err := snaps.Open(metas[0].ID)
		if err != nil {
			return fmt.Errorf("open snapshot %s: %w", metas[0].ID, err)
		}
		if err := f.Restore(rc); err != nil {
			return fmt.Errorf("snapshot %s: %w", metas[0].ID, err)
		}
		from = metas[0].Index
	}
	first, _ := store.FirstIndex()
	last, _ := store.LastIndex()
	for i := max(first, from+1); i <= last && i > 0; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			return fmt.Errorf("raft log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand {
			f.Apply(&l)
		}
	}
	return nil
}

// OrID is a server's node name, or its Raft ID when the record names no node for it.
func OrID(name, id string) string {
	if name == "" {
		return id
	}
	return name
}
