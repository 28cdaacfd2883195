package agent

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// NoQuorumError is a request no leader could answer: it names the voters this server cannot reach.
type NoQuorumError struct {
	Server  string
	Voters  []string
	Missing []string
	Cause   error
}

func (e *NoQuorumError) Error() string {
	need := len(e.Voters)/2 + 1
	reach := len(e.Voters) - len(e.Missing)
	msg := fmt.Sprintf("no raft leader: the record needs a quorum of %d of its %d voters (%s), and server %s reaches %d",
		need, len(e.Voters), strings.Join(e.Voters, ", "), e.Server, reach)
	if len(e.Missing) > 0 {
		msg += fmt.Sprintf("; missing: %s", strings.Join(e.Missing, ", "))
	}
	if reach < need {
		msg += ". Bring them back; if they are lost for good, stop the agent on each surviving server and run `meshd operator raft recover` there (docs/runbook.md)"
	} else {
		msg += "; an election may be under way: try again in a moment"
	}
	if e.Cause != nil {
		msg += fmt.Sprintf(" (%v)", e.Cause)
	}
	return msg
}

// quorumError names the voters of the configuration this server holds and which of them it
// cannot reach on their Raft port.
func (s *forwarder) quorumError(cause error) error {
	e := &NoQuorumError{Server: s.node.Name, Cause: cause}
	cfg, err := s.rec.Configuration()
	if err != nil {
		return e
	}
	names := s.rec.NamesByID()
	for _, sv := range cfg {
		if sv.Suffrage != raft.Voter {
			continue
		}
		name := names[string(sv.ID)]
		if name == "" {
			name = string(sv.ID)
		}
		e.Voters = append(e.Voters, name)
		if string(sv.ID) == s.node.ID {
			continue
		}
		c, err := net.DialTimeout("tcp", string(sv.Address), 500*time.Millisecond)
		if err != nil {
			e.Missing = append(e.Missing, fmt.Sprintf("%s (raft %s: %v)", name, sv.Address, errors.Unwrap(err)))
			continue
		}
		c.Close()
	}
	sort.Strings(e.Voters)
	return e
}
