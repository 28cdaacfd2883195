package api

// KeyView is one key on a node's ring, by fingerprint.
type KeyView struct {
	ID      string `json:"id"`
	Primary bool   `json:"primary"`
}

// KeyringMember is one node's ring, or why it could not be read or changed.
type KeyringMember struct {
	Node  string    `json:"node"`
	Keys  []KeyView `json:"keys"`
	Error string    `json:"error,omitempty"`
}

// KeyringRequest is an operation: install, use or remove KEY (base64, std).
type KeyringRequest struct {
	Op  string `json:"op"`
	Key string `json:"key,omitempty"`
}

// KeyringResult is what an operation did on every node.
type KeyringResult struct {
	Op    string `json:"op,omitempty"`
	KeyID string `json:"key_id,omitempty"`
	// Key is set only when install made the key: it is shown this once.
	Key     string          `json:"key,omitempty"`
	Members []KeyringMember `json:"members"`
	// Failed names the nodes the operation did not reach or that refused it.
	Failed []string `json:"failed,omitempty"`
}
