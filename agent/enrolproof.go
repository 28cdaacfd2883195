package agent

import (
	"fmt"

	"meshd/api"
	"meshd/fsm"
	"meshd/pki"
)

// enrolledBefore reads what the record says of an enrolment's token before it is applied, with
// proof the result of checking the request's signature (nil when the key it names signed it).
// A token not yet used needs the proof alone. A used one enrols nothing new: only the same
// enrolment again (the node it enrolled, with that node's key, signed by that key) goes on, and
// again says so; everything else is refused as a used token, naming the node it enrolled.
func (s *bus) enrolledBefore(in *api.EnrolRequest, proof error) (again bool, err error) {
	var tok fsm.Token
	var node fsm.Node
	var haveTok, haveNode bool
	s.rec.Read(func(r *fsm.Record, _ uint64) {
		if t := r.Tokens[pki.TokenHash(in.Token)]; t != nil {
			tok, haveTok = *t, true
			if n := r.Nodes[t.UsedBy]; n != nil {
				node, haveNode = *n, true
			}
		}
	})
	if !haveTok || tok.UsedBy == "" {
		return false, proof
	}
	used := fmt.Sprintf("token already used to enrol node %s at %s; "+
		"a retried join must come from that machine",
		tok.UsedBy, tok.UsedAt.UTC().Format("2006-01-02 15:04:05Z"))
	var why string
	switch {
	case in.Node != tok.UsedBy:
		why = fmt.Sprintf("this request is for node %s", in.Node)
	case !haveNode:
		why = fmt.Sprintf("node %s has been removed since: make a new token", tok.UsedBy)
	case node.PublicKey != in.PublicKey:
		why = fmt.Sprintf("node %s is already enrolled with another key", tok.UsedBy)
	case proof != nil:
		why = fmt.Sprintf("the request is not signed by node %s's key: %v", tok.UsedBy, proof)
	case node.Server != in.Server:
		why = fmt.Sprintf("node %s was enrolled as a %s", tok.UsedBy, roleWord(node.Server))
	default:
		return true, nil
	}
	return false, fmt.Errorf("%s (%s)", used, why)
}

func roleWord(server bool) string {
	if server {
		return "server"
	}
	return "client"
}
