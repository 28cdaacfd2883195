package api

import (
	"time"

	"meshd/fsm"
)

// TokenRequest asks a server for an enrolment token.
type TokenRequest struct {
	Mode fsm.Mode `json:"mode"`
	// Server makes a token that enrols a server.
	Server bool `json:"server,omitempty"`
	// TTL is how long the token is good for, a Go duration ("1h").
	TTL string `json:"ttl"`
}

// TokenView is a token made: its text (shown once; the record keeps only its hash) and what it
// says.
type TokenView struct {
	Token   string    `json:"token"`
	ID      string    `json:"id"`
	Mode    fsm.Mode  `json:"mode"`
	Expires time.Time `json:"expires"`
	Bus     []string  `json:"bus"`
	CA      string    `json:"ca"`
	Hash    string    `json:"hash"`
	Server  bool      `json:"server,omitempty"`
	// Warning is said with a server token when the servers it would make are an even count.
	Warning string `json:"warning,omitempty"`
}
