package agent

import (
	"fmt"
	"net/http"
	"strings"

	"meshd/api"
)

// getStatus is `meshd status` on a client's socket (issue 36): the README's next step after a
// join. A client holds no record, so it answers what it knows of itself: its declaration as a
// server last gave it, the servers it follows and which answered last, its gossip view, and
// where the whole record is read. It asks no server: nothing leaves with the node's certificate.
func (c *clientRole) getStatus(w http.ResponseWriter, _ *http.Request) {
	cs := api.ClientStatus{Node: c.node.Name, Assigned: []string{}, Taken: []string{}, Members: []api.MemberView{}}
	c.declMu.Lock()
	if d := c.decl; d != nil {
		cs.Mode, cs.Index, cs.Address = d.Mode, c.declIndex, d.Address
		cs.Assigned, cs.Taken = append(cs.Assigned, d.Assigned...), append(cs.Taken, d.Taken...)
	}
	c.declMu.Unlock()
	c.serversMu.Lock()
	cs.Servers = append([]string{}, c.servers...)
	cs.Answered, cs.AnsweredAt = c.answered, c.answeredAt
	c.serversMu.Unlock()
	// The node's own gossip, as a server's status says its own: a client runs one too.
	gs := api.GossipSummary{Node: c.node.Name, Rejected: map[string]uint64{}}
	if g := c.gossip.member(); g != nil {
		cs.Members = memberViews(g)
		gs.Running = true
		for r, n := range g.Rejected() {
			gs.Rejected[string(r)] = n
		}
	}
	cs.Record = fmt.Sprintf("node %s is a client: the whole record is read on a server (%s) or with an operator credential (meshd operator credential create)",
		c.node.Name, strings.Join(c.serverNames(), ", "))
	api.WriteJSON(w, http.StatusOK, api.StatusView{ServedBy: c.node.Name, Gossip: gs, Client: &cs})
}
