package api

import (
	"time"

	"meshd/fsm"
)

// CredentialRequest asks a server to issue an operator credential.
type CredentialRequest struct {
	Name string `json:"name"`
	// TTL is how long the credential is good for, a Go duration ("720h").
	TTL string `json:"ttl"`
}

// CredentialView is an operator credential as the record lists it, with its state at the
// answer's time: "active", "revoked" or "expired".
type CredentialView struct {
	fsm.Credential
	State string `json:"state"`
}

// CredentialViewOf is c's view at now.
func CredentialViewOf(c fsm.Credential, now time.Time) CredentialView {
	v := CredentialView{Credential: c, State: "active"}
	switch {
	case c.Revoked():
		v.State = "revoked"
	case !now.Before(c.Expires):
		v.State = "expired"
	}
	return v
}

// CredentialIssued is a credential made: the record's entry and the credential file (its
// certificate, private key, the mesh CA and the servers' bus addresses). The file is a secret,
// shown this once: the record keeps only the certificate's ID.
type CredentialIssued struct {
	Credential CredentialView `json:"credential"`
	File       string         `json:"file"`
	Bus        []string       `json:"bus"`
}
