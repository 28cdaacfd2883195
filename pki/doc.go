// Package pki owns the mesh's secrets: the mesh CA made at genesis and the node certificates it
// issues (every node's identity is an ed25519 key, the same key that signs its gossip reports),
// the enrolment tokens the CA signs, a joining machine's signature over its enrolment request
// (EnrolClaim: it holds the key it enrols), a node's signed announcement that its overlay key
// moves (KeyAnnouncement), and the seal that keeps every secret encrypted at rest.
//
// Why one package: each of these is a small amount of crypto whose mistakes are silent, so they
// are kept together, with no I/O but the files they seal, and tested on their own. A token is
// `base64url(payload JSON) + "." + base64url(CA signature)`; the record keeps only its SHA-256,
// so a stolen snapshot enrols nothing. Sealed files are AES-256-GCM under a seal key kept in its
// own file (default /etc/meshd/seal.key), away from the data dir, so a copy of the data dir alone
// opens no secret; the seal key's recovery code, printed once, restores a lost key file. The
// same key seals the record at rest (the Raft log and snapshots, the host's record store):
// sealbolt.go marks a bolt file whose values are all sealed, and rewrites one sealed in place
// into a fresh file, so no freed page keeps what it held before.
package pki
