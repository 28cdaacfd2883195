package agent

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"

	"meshd/api"
	"meshd/gossip"
	"meshd/pki"
)

// Gossip key rotation without a restart: a server fans each operation out to every node over the
// bus; each node applies it to its running member and re-seals its keyring file, so a restart
// comes back with the same keys. Keys are shown by fingerprint (gossip.KeyID), never themselves,
// except the one `meshd keyring install` makes, printed once.

func keyViews(keys []gossip.Key) []api.KeyView {
	out := make([]api.KeyView, len(keys))
	for i, k := range keys {
		out[i] = api.KeyView{ID: k.ID, Primary: k.Primary}
	}
	return out
}

// localKeys is this node's ring.
func (a *Agent) localKeys() ([]api.KeyView, error) {
	g := a.member()
	if g == nil {
		return nil, fmt.Errorf("node %s: %w", a.node.Name, errNoGossip)
	}
	return keyViews(g.KeyringList()), nil
}

// applyKeyring applies an operation to this node's running member and re-seals its keyring.
func (a *Agent) applyKeyring(op string, key []byte) ([]api.KeyView, error) {
	a.gs.keyMu.Lock()
	defer a.gs.keyMu.Unlock()
	g := a.member()
	if g == nil {
		return nil, fmt.Errorf("node %s: %w", a.node.Name, errNoGossip)
	}
	var err error
	switch op {
	case "install":
		err = g.KeyringInstall(key)
	case "use":
		err = g.KeyringUse(key)
	case "remove":
		err = g.KeyringRemove(key)
	default:
		return nil, fmt.Errorf("keyring operation %q: want install, use or remove", op)
	}
	if err != nil {
		return nil, err
	}
	keys := g.KeyringList()
	ring := pki.Keyring{}
	for _, k := range keys {
		ring.Keys = append(ring.Keys, k.Key)
	}
	if err := pki.WriteKeyring(a.cfg.DataDir, pki.SealKeyPath(a.cfg.SealKey), ring); err != nil {
		return nil, fmt.Errorf("node %s: key %s %s in the running member, but the sealed keyring in %s: %w", a.node.Name, gossip.KeyID(key), op+"ed", a.cfg.DataDir, err)
	}
	a.secrets.Keyring = ring
	return keyViews(keys), nil
}

// currentKeyring is the keyring enrolment hands a new node.
func (a *Agent) currentKeyring() [][]byte {
	a.gs.keyMu.Lock()
	defer a.gs.keyMu.Unlock()
	return a.secrets.Keyring.Keys
}

func (a *Agent) getLocalKeyring(w http.ResponseWriter, _ *http.Request) {
	keys, err := a.localKeys()
	if err != nil {
		writeErr(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, api.KeyringMember{Node: a.node.Name, Keys: keys})
}

func decodeKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(k) != gossip.KeySize {
		return nil, fmt.Errorf("gossip key %q: want %d bytes, base64 (as `meshd keyring install` prints it)", s, gossip.KeySize)
	}
	return k, nil
}

func (a *Agent) postLocalKeyring(w http.ResponseWriter, req *http.Request) {
	var in api.KeyringRequest
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<16)).Decode(&in); err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "keyring request: " + err.Error()})
		return
	}
	key, err := decodeKey(in.Key)
	if err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: err.Error()})
		return
	}
	keys, err := a.applyKeyring(in.Op, key)
	if err != nil {
		api.WriteJSON(w, http.StatusUnprocessableEntity, api.ErrorBody{Error: err.Error()})
		return
	}
	api.WriteJSON(w, http.StatusOK, api.KeyringMember{Node: a.node.Name, Keys: keys})
}

// fanOut runs f for every node (this one locally) at once and collects the answers by node.
func (a *Agent) fanOut(ctx context.Context, local func() ([]api.KeyView, error), remote func(context.Context, api.GossipPeer) ([]api.KeyView, error)) api.KeyringResult {
	view := a.peers.gossipView()
	res := api.KeyringResult{Members: make([]api.KeyringMember, len(view.Nodes))}
	var wg sync.WaitGroup
	for i, p := range view.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var keys []api.KeyView
			var err error
			if p.Name == a.node.Name {
				keys, err = local()
			} else {
				keys, err = remote(ctx, p)
			}
			m := api.KeyringMember{Node: p.Name, Keys: keys}
			if m.Keys == nil {
				m.Keys = []api.KeyView{}
			}
			if err != nil {
				m.Error = err.Error()
			}
			res.Members[i] = m
		}()
	}
	wg.Wait()
	for _, m := range res.Members {
		if m.Error != "" {
			res.Failed = append(res.Failed, m.Node)
		}
	}
	return res
}

// getKeyring is `meshd keyring list`: every node's ring.
func (a *Agent) getKeyring(w http.ResponseWriter, req *http.Request) {
	res := a.fanOut(req.Context(), a.localKeys, func(ctx context.Context, p api.GossipPeer) ([]api.KeyView, error) {
		var m api.KeyringMember
		err := a.peerJSON(ctx, p, http.MethodGet, "/v1/keyring/local", nil, &m)
		return m.Keys, err
	})
	api.WriteJSON(w, http.StatusOK, res)
}

// postKeyring is `meshd keyring install|use|remove`: the operation on every node. `use` is
// refused unless every node has the key installed, and `remove` unless no node uses it, so no
// member is cut off by a step taken too early.
func (a *Agent) postKeyring(w http.ResponseWriter, req *http.Request) {
	var in api.KeyringRequest
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<16)).Decode(&in); err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "keyring request: " + err.Error()})
		return
	}
	made := ""
	if in.Op == "install" && in.Key == "" {
		k := make([]byte, gossip.KeySize)
		if _, err := rand.Read(k); err != nil {
			writeErr(w, err)
			return
		}
		in.Key = base64.StdEncoding.EncodeToString(k)
		made = in.Key
	}
	if in.Op != "install" && in.Op != "use" && in.Op != "remove" {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: fmt.Sprintf("keyring operation %q: want install, use or remove", in.Op)})
		return
	}
	key, err := decodeKey(in.Key)
	if err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: err.Error()})
		return
	}
	id := gossip.KeyID(key)
	if in.Op == "use" || in.Op == "remove" {
		list := a.fanOut(req.Context(), a.localKeys, func(ctx context.Context, p api.GossipPeer) ([]api.KeyView, error) {
			var m api.KeyringMember
			err := a.peerJSON(ctx, p, http.MethodGet, "/v1/keyring/local", nil, &m)
			return m.Keys, err
		})
		var lacking, using []string
		for _, m := range list.Members {
			has, primary := false, false
			for _, k := range m.Keys {
				if k.ID == id {
					has, primary = true, k.Primary
				}
			}
			switch {
			case m.Error != "":
				lacking = append(lacking, fmt.Sprintf("%s (%s)", m.Node, m.Error))
			case in.Op == "use" && !has:
				lacking = append(lacking, m.Node)
			case in.Op == "remove" && primary:
				using = append(using, m.Node)
			}
		}
		if in.Op == "use" && len(lacking) > 0 {
			api.WriteJSON(w, http.StatusConflict, api.ErrorBody{Error: fmt.Sprintf("key %s is not installed on every node (missing or unreachable: %v): install it everywhere first, or nodes without it would be cut off", id, lacking)})
			return
		}
		if in.Op == "remove" && (len(using) > 0 || len(lacking) > 0) {
			api.WriteJSON(w, http.StatusConflict, api.ErrorBody{Error: fmt.Sprintf("key %s is still the primary key on %v (unreachable: %v): use another key everywhere first", id, using, lacking)})
			return
		}
	}
	res := a.fanOut(req.Context(), func() ([]api.KeyView, error) { return a.applyKeyring(in.Op, key) },
		func(ctx context.Context, p api.GossipPeer) ([]api.KeyView, error) {
			var m api.KeyringMember
			err := a.peerJSON(ctx, p, http.MethodPost, "/v1/keyring/local", api.KeyringRequest{Op: in.Op, Key: in.Key}, &m)
			return m.Keys, err
		})
	res.Op, res.KeyID, res.Key = in.Op, id, made
	a.log.Info("gossip keyring operation", "op", in.Op, "key", id, "failed", res.Failed)
	api.WriteJSON(w, http.StatusOK, res)
}
