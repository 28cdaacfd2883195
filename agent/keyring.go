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

// keyrings is the node's gossip keyring: its ring in the running member and sealed on disk,
// what enrolment hands a new node, and on a server each operation fanned out to every node.
type keyrings struct {
	self
	dataDir, sealKey string
	secrets          *pki.NodeSecrets
	// mu serialises keyring operations and the sealed keyring's rewrite.
	mu sync.Mutex
	// member is the running gossip member (nil before it starts); view every node as this
	// node's kind knows them; ask calls another node's bus.
	member func() *gossip.Gossip
	view   func() api.GossipView
	ask    peerAsker
}

// newKeyrings is this agent's keyring, over its running member and its kind's gossip view.
func (a *Agent) newKeyrings() *keyrings {
	return &keyrings{self: self{node: a.node, log: a.log}, dataDir: a.cfg.DataDir, sealKey: a.cfg.SealKey, secrets: a.secrets,
		member: a.member, view: func() api.GossipView { return a.peers.gossipView() }, ask: a}
}

// routes are the socket's keyring routes, a server's: it changes every node's ring.
func (k *keyrings) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/keyring", k.getKeyring)
	mux.HandleFunc("POST /v1/keyring", k.postKeyring)
}

// peerRoutes are the bus's: a server asks each node for its ring and changes it.
func (k *keyrings) peerRoutes(mux *http.ServeMux, withPeer func(bool, func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc) {
	mux.HandleFunc("GET /v1/keyring/local", withPeer(true, func(w http.ResponseWriter, r *http.Request, _ string) { k.getLocalKeyring(w, r) }))
	mux.HandleFunc("POST /v1/keyring/local", withPeer(true, func(w http.ResponseWriter, r *http.Request, _ string) { k.postLocalKeyring(w, r) }))
}

func keyViews(keys []gossip.Key) []api.KeyView {
	out := make([]api.KeyView, len(keys))
	for i, k := range keys {
		out[i] = api.KeyView{ID: k.ID, Primary: k.Primary}
	}
	return out
}

// localKeys is this node's ring.
func (k *keyrings) localKeys() ([]api.KeyView, error) {
	g := k.member()
	if g == nil {
		return nil, fmt.Errorf("node %s: %w", k.node.Name, errNoGossip)
	}
	return keyViews(g.KeyringList()), nil
}

// applyKeyring applies an operation to this node's running member and re-seals its keyring.
func (k *keyrings) applyKeyring(op string, key []byte) ([]api.KeyView, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	g := k.member()
	if g == nil {
		return nil, fmt.Errorf("node %s: %w", k.node.Name, errNoGossip)
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
	if err := pki.WriteKeyring(k.dataDir, pki.SealKeyPath(k.sealKey), ring); err != nil {
		return nil, fmt.Errorf("node %s: key %s %s in the running member, but the sealed keyring in %s: %w", k.node.Name, gossip.KeyID(key), op+"ed", k.dataDir, err)
	}
	k.secrets.Keyring = ring
	return keyViews(keys), nil
}

// currentKeyring is the keyring enrolment hands a new node.
func (k *keyrings) currentKeyring() [][]byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.secrets.Keyring.Keys
}

func (k *keyrings) getLocalKeyring(w http.ResponseWriter, _ *http.Request) {
	keys, err := k.localKeys()
	if err != nil {
		writeErr(w, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, api.KeyringMember{Node: k.node.Name, Keys: keys})
}

func decodeKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(k) != gossip.KeySize {
		return nil, fmt.Errorf("gossip key %q: want %d bytes, base64 (as `meshd keyring install` prints it)", s, gossip.KeySize)
	}
	return k, nil
}

func (k *keyrings) postLocalKeyring(w http.ResponseWriter, req *http.Request) {
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
	keys, err := k.applyKeyring(in.Op, key)
	if err != nil {
		api.WriteJSON(w, http.StatusUnprocessableEntity, api.ErrorBody{Error: err.Error()})
		return
	}
	api.WriteJSON(w, http.StatusOK, api.KeyringMember{Node: k.node.Name, Keys: keys})
}

// fanOut runs f for every node (this one locally) at once and collects the answers by node.
func (k *keyrings) fanOut(ctx context.Context, local func() ([]api.KeyView, error), remote func(context.Context, api.GossipPeer) ([]api.KeyView, error)) api.KeyringResult {
	view := k.view()
	res := api.KeyringResult{Members: make([]api.KeyringMember, len(view.Nodes))}
	var wg sync.WaitGroup
	for i, p := range view.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var keys []api.KeyView
			var err error
			if p.Name == k.node.Name {
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
func (k *keyrings) getKeyring(w http.ResponseWriter, req *http.Request) {
	res := k.fanOut(req.Context(), k.localKeys, func(ctx context.Context, p api.GossipPeer) ([]api.KeyView, error) {
		var m api.KeyringMember
		err := k.ask.peerJSON(ctx, p, http.MethodGet, "/v1/keyring/local", nil, &m)
		return m.Keys, err
	})
	api.WriteJSON(w, http.StatusOK, res)
}

// postKeyring is `meshd keyring install|use|remove`: the operation on every node. `use` is
// refused unless every node has the key installed, and `remove` unless no node uses it, so no
// member is cut off by a step taken too early.
func (k *keyrings) postKeyring(w http.ResponseWriter, req *http.Request) {
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
		list := k.fanOut(req.Context(), k.localKeys, func(ctx context.Context, p api.GossipPeer) ([]api.KeyView, error) {
			var m api.KeyringMember
			err := k.ask.peerJSON(ctx, p, http.MethodGet, "/v1/keyring/local", nil, &m)
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
	res := k.fanOut(req.Context(), func() ([]api.KeyView, error) { return k.applyKeyring(in.Op, key) },
		func(ctx context.Context, p api.GossipPeer) ([]api.KeyView, error) {
			var m api.KeyringMember
			err := k.ask.peerJSON(ctx, p, http.MethodPost, "/v1/keyring/local", api.KeyringRequest{Op: in.Op, Key: in.Key}, &m)
			return m.Keys, err
		})
	res.Op, res.KeyID, res.Key = in.Op, id, made
	k.log.Info("gossip keyring operation", "op", in.Op, "key", id, "failed", res.Failed)
	api.WriteJSON(w, http.StatusOK, res)
}
