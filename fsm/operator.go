package fsm

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Credential is an operator credential as the record lists it: a certificate the mesh CA issued
// to a person. The record holds its name, its ID (the certificate's serial, pki.CredentialID),
// when it expires, when and by whom it was made, and, once revoked, when and by whom.
type Credential struct {
	Name      string    `json:"name"`
	ID        string    `json:"id"`
	Expires   time.Time `json:"expires"`
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by,omitempty"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	RevokedBy string    `json:"revoked_by,omitempty"`
}

// Revoked says whether the credential was revoked.
func (c *Credential) Revoked() bool { return !c.RevokedAt.IsZero() }

// credentialNameRe is pki.CheckOperatorName's rule, checked again here: the record takes no name
// a certificate could not carry.
var credentialNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

var credentialIDRe = regexp.MustCompile(`^[0-9a-f]{1,64}$`)

// CheckCredential says why the record does not take the operator credential name with ID id at
// now: unlisted, another certificate under that name, revoked, or expired. nil means it is good.
func (r *Record) CheckCredential(name, id string, now time.Time) error {
	c := r.Credentials[name]
	switch {
	case c == nil:
		return fmt.Errorf("operator credential %s is not in the record (it lists: %s)", name, credentialNames(r))
	case c.ID != id:
		return fmt.Errorf("operator credential %s: this certificate (id %s) is not the one the record lists under that name (id %s, created %s)", name, id, c.ID, c.Created.Format(time.RFC3339))
	case c.Revoked():
		return fmt.Errorf("operator credential %s was revoked at %s by %s", name, c.RevokedAt.Format(time.RFC3339), orSomeone(c.RevokedBy))
	case !now.Before(c.Expires):
		return fmt.Errorf("operator credential %s expired at %s; make a new one on a server (meshd operator credential create --name %s)", name, c.Expires.Format(time.RFC3339), name)
	}
	return nil
}

func credentialNames(r *Record) string {
	names := sortedKeys(r.Credentials)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func orSomeone(by string) string {
	if by == "" {
		return "an operator"
	}
	return by
}

// applyCredentialCreate lists a new operator credential. A name in use by a credential that is
// neither revoked nor expired is refused; a revoked or expired one is replaced (its certificate's
// ID no longer matches, so it stays refused).
func applyCredentialCreate(r *Record, c *Command, b *CredentialCreate) (any, error) {
	old := r.Credentials[b.Name]
	switch {
	case !credentialNameRe.MatchString(b.Name):
		return nil, refuse(c.Op, "", "", "%q is not an operator credential's name", b.Name)
	case !credentialIDRe.MatchString(b.ID):
		return nil, refuse(c.Op, "", "", "operator credential %s: %q is not a certificate serial in hex", b.Name, b.ID)
	case !b.Expires.After(c.At):
		return nil, refuse(c.Op, "", "", "operator credential %s would expire before it was made", b.Name)
	case old != nil && !old.Revoked() && old.Expires.After(c.At):
		return nil, refuse(c.Op, "", "", "operator credential %s already exists (created %s by %s, expires %s): revoke it first (meshd operator credential revoke %s) or choose another name",
			b.Name, old.Created.Format(time.RFC3339), orSomeone(old.CreatedBy), old.Expires.Format(time.RFC3339), b.Name)
	}
	for _, o := range r.Credentials {
		if o.ID == b.ID {
			return nil, refuse(c.Op, "", "", "operator credential %s: id %s is credential %s's already", b.Name, b.ID, o.Name)
		}
	}
	cr := &Credential{Name: b.Name, ID: b.ID, Expires: b.Expires.UTC(), Created: c.At, CreatedBy: c.By}
	if r.Credentials == nil {
		r.Credentials = map[string]*Credential{}
	}
	r.Credentials[b.Name] = cr
	return cr, nil
}

// applyCredentialRevoke revokes an operator credential by name, at once and for good.
func applyCredentialRevoke(r *Record, c *Command, b *CredentialRevoke) (any, error) {
	cr := r.Credentials[b.Name]
	switch {
	case cr == nil:
		return nil, refuse(c.Op, "", "", "operator credential %s is not in the record (it lists: %s)", b.Name, credentialNames(r))
	case cr.Revoked():
		return nil, refuse(c.Op, "", "", "operator credential %s is already revoked (at %s by %s)", b.Name, cr.RevokedAt.Format(time.RFC3339), orSomeone(cr.RevokedBy))
	}
	cr.RevokedAt, cr.RevokedBy = c.At, c.By
	return cr, nil
}
