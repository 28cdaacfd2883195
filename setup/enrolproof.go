package setup

import (
	"crypto/ed25519"
	"time"

	"meshd/api"
	"meshd/pki"
)

// EnrolClaim is what an enrolment request's signature covers (pki.EnrolClaim): the joining
// machine signs it, the server checks it.
func EnrolClaim(r *api.EnrolRequest) pki.EnrolClaim {
	return pki.EnrolClaim{TokenHash: pki.TokenHash(r.Token), Node: r.Node, ID: r.ID,
		PublicKey: r.PublicKey, Advertise: r.Advertise, WireGuardKey: r.WireGuardKey,
		FoundTunnel: r.FoundTunnel, Settings: r.Settings, Server: r.Server, At: r.SignedAt}
}

// SignEnrolment signs r at now with the node's identity key, whose public half r names: the
// server enrols no key whose holder did not sign, so a used token and a node's public key (which
// its certificate shows) get nobody that node's enrolment again.
func SignEnrolment(r *api.EnrolRequest, key ed25519.PrivateKey, now time.Time) {
	r.PublicKey = pki.PublicKeyString(key.Public().(ed25519.PublicKey))
	r.SignedAt = now.Unix()
	r.Signature = pki.SignEnrolment(key, EnrolClaim(r))
}
