package agent

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/pki"
)

// Operator credentials: issued by a server with the mesh CA key it holds (as it signs tokens),
// listed in the record by their certificate's ID, revoked by name.

// createCredential issues an operator credential and lists it in the record; the credential file
// (its private key included) goes back only once the record committed it.
func (s *recordAPI) createCredential(w http.ResponseWriter, req *http.Request) {
	var in api.CredentialRequest
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<20)).Decode(&in); err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "operator credential request: " + err.Error()})
		return
	}
	if err := pki.CheckOperatorName(in.Name); err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: err.Error()})
		return
	}
	ttl, err := time.ParseDuration(in.TTL)
	if err != nil || ttl < time.Minute || ttl > pki.MaxOperatorTTL {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: fmt.Sprintf("--ttl %q: give a duration from 1m to %s, such as 720h (30 days)", in.TTL, pki.MaxOperatorTTL)})
		return
	}
	var bus []string
	s.rec.Read(func(r *fsm.Record, _ uint64) { bus = busAddresses(r) })
	if len(bus) == 0 {
		writeErr(w, fmt.Errorf("the record names no server with a bus address to put in the credential"))
		return
	}
	key, err := pki.NewNodeKey()
	if err != nil {
		writeErr(w, err)
		return
	}
	certPEM, err := s.secrets.CA.IssueOperator(in.Name, key.Public().(ed25519.PublicKey), time.Now(), ttl)
	if err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: err.Error()})
		return
	}
	file, err := pki.EncodeCredential(certPEM, key, s.secrets.CACertPEM, bus)
	if err != nil {
		writeErr(w, err)
		return
	}
	cred, err := pki.ParseCredential(file)
	if err != nil {
		writeErr(w, err)
		return
	}
	v, index, err := s.propose(req, fsm.OpCredentialCreate, fsm.CredentialCreate{Name: in.Name, ID: pki.CredentialID(cred.Cert), Expires: cred.Cert.NotAfter.UTC()})
	committedAt(w, index)
	if err != nil {
		writeErr(w, err)
		return
	}
	c := v.(*fsm.Credential)
	s.log.Info("operator credential created", "name", c.Name, "id", c.ID, "expires", c.Expires, "by", c.CreatedBy)
	api.WriteJSON(w, http.StatusOK, api.CredentialIssued{Credential: api.CredentialViewOf(*c, time.Now()), File: string(file), Bus: bus})
}

// listCredentials lists the record's operator credentials by name, revoked and expired ones
// included.
func (s *recordAPI) listCredentials(w http.ResponseWriter, _ *http.Request) {
	out := []api.CredentialView{}
	now := time.Now()
	s.rec.Read(func(r *fsm.Record, _ uint64) {
		for _, c := range r.Credentials {
			out = append(out, api.CredentialViewOf(*c, now))
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	api.WriteJSON(w, http.StatusOK, out)
}

// revokeCredential revokes an operator credential: the bus refuses it from the next request on.
func (s *recordAPI) revokeCredential(w http.ResponseWriter, req *http.Request) {
	v, index, err := s.propose(req, fsm.OpCredentialRevoke, fsm.CredentialRevoke{Name: req.PathValue("name")})
	committedAt(w, index)
	if err != nil {
		writeErr(w, err)
		return
	}
	c := v.(*fsm.Credential)
	s.log.Info("operator credential revoked", "name", c.Name, "id", c.ID, "by", c.RevokedBy)
	api.WriteJSON(w, http.StatusOK, api.CredentialViewOf(*c, time.Now()))
}
