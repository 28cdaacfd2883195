package autopilot

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The autopilot's rule: a server is current when its record is within TrailingEntries of the
// leader's commit index, and it must stay current for Stabilization before it gets a vote or the
// leadership.
const (
	TrailingEntries = 16
	Stabilization   = 2 * time.Second
)

// Server is a server as the record names it, with its Raft address.
type Server struct {
	Name, ID, RaftAddr string
}

// Raft is what the autopilot asks of the leader's Raft node.
type Raft interface {
	IsLeader() bool
	Configuration() ([]raft.Server, error)
	CommitIndex() uint64
	AddNonvoter(id, addr string, timeout time.Duration) error
	AddVoter(id, addr string, timeout time.Duration) error
	RemoveServer(id string, timeout time.Duration) error
	TransferLeadership(id, addr string) error
}

// Record is what the autopilot reads of the record.
type Record interface {
	// Servers are the record's servers with a Raft address, removed the IDs of its nodes that
	// are no longer servers, and control the control-node's name.
	Servers() (servers []Server, removed map[string]bool, control string)
	// ControlNode is the control-node's name ("" before genesis is recorded).
	ControlNode() string
}

// Asker asks a server for the index its record applied (its Raft state, over the bus).
type Asker interface {
	Applied(ctx context.Context, s Server) (uint64, error)
}

// Config is what New needs: this server's node name and Raft ID, and what it works through.
type Config struct {
	Name, ID string
	Raft     Raft
	Record   Record
	Asker    Asker
	Log      *slog.Logger
}

// Autopilot is the leader's care of the group; Run makes its passes.
type Autopilot struct {
	cfg Config
	now func() time.Time
	// current is since when each server has been current (absent: it is not).
	current map[raft.ServerID]time.Time
	mu      sync.Mutex
	// voters is the voter count last warned about.
	voters int
	why    string
}

// New is an autopilot for server cfg.Name.
func New(cfg Config) *Autopilot {
	return &Autopilot{cfg: cfg, now: time.Now, current: map[raft.ServerID]time.Time{}}
}

// Run makes the leader's passes until ctx ends.
func (a *Autopilot) Run(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !a.cfg.Raft.IsLeader() {
			a.current = map[raft.ServerID]time.Time{}
			continue
		}
		a.Pass(ctx)
	}
}

// Pass adds the record's servers Raft does not have yet as non-voters, promotes those current
// for Stabilization, takes out servers the record removed, and hands leadership back to the
// control-node once it is current.
func (a *Autopilot) Pass(ctx context.Context) {
	cfg, err := a.cfg.Raft.Configuration()
	if err != nil {
		return
	}
	in := map[raft.ServerID]raft.Server{}
	voters := 0
	for _, sv := range cfg {
		in[sv.ID] = sv
		if sv.Suffrage == raft.Voter {
			voters++
		}
	}
	log := a.cfg.Log
	servers, removed, control := a.cfg.Record.Servers()
	commit := a.cfg.Raft.CommitIndex()
	for _, g := range servers {
		id := raft.ServerID(g.ID)
		sv, ok := in[id]
		switch {
		case !ok:
			log.Info("raft: adding a server as a non-voter; it votes once its log is current", "server", g.Name, "raft", g.RaftAddr)
			if err := a.cfg.Raft.AddNonvoter(g.ID, g.RaftAddr, 5*time.Second); err != nil {
				log.Warn("raft: add non-voter", "server", g.Name, "err", err)
			}
		case sv.Suffrage == raft.Nonvoter:
			if a.isCurrent(ctx, g, commit) {
				log.Info("raft: promoting a current server to voter", "server", g.Name)
				if err := a.cfg.Raft.AddVoter(g.ID, string(sv.Address), 5*time.Second); err != nil {
					log.Warn("raft: promote", "server", g.Name, "err", err)
				}
			}
		}
	}
	for id := range in {
		if removed[string(id)] && id != raft.ServerID(a.cfg.ID) {
			log.Info("raft: the record removed a server; taking it out of the group", "id", id)
			if err := a.cfg.Raft.RemoveServer(string(id), 5*time.Second); err != nil {
				log.Warn("raft: remove server", "id", id, "err", err)
			}
		}
	}
	a.mu.Lock()
	if voters != a.voters {
		a.voters = voters
		if w := EvenWarning(voters); w != "" {
			log.Warn("raft: " + w)
		}
	}
	a.mu.Unlock()
	a.leadBack(ctx, control, servers, in, commit)
}

// isCurrent asks server g for its Raft state and says whether it has been current (within
// TrailingEntries of commit) for Stabilization.
func (a *Autopilot) isCurrent(ctx context.Context, g Server, commit uint64) bool {
	id := raft.ServerID(g.ID)
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	applied, err := a.cfg.Asker.Applied(qctx, g)
	cancel()
	if err != nil || applied+TrailingEntries < commit {
		delete(a.current, id)
		return false
	}
	since, ok := a.current[id]
	if !ok {
		a.current[id] = a.now()
		return false
	}
	return a.now().Sub(since) >= Stabilization
}

// leadBack hands leadership to the control-node once it is a voter and current, and keeps the
// reason the leader leads for status.
func (a *Autopilot) leadBack(ctx context.Context, control string, servers []Server, in map[raft.ServerID]raft.Server, commit uint64) {
	self := a.cfg.Name
	why := ""
	defer func() {
		a.mu.Lock()
		a.why = why
		a.mu.Unlock()
	}()
	if control == self {
		why = "the control-node leads"
		return
	}
	var g *Server
	for i := range servers {
		if servers[i].Name == control {
			g = &servers[i]
		}
	}
	switch {
	case g == nil:
		why = fmt.Sprintf("the record names no control-node server (%q); %s leads", control, self)
		return
	case in[raft.ServerID(g.ID)].Suffrage != raft.Voter:
		why = fmt.Sprintf("control-node %s is not a voter (yet); %s leads until it is and its log is current", control, self)
		return
	}
	if !a.isCurrent(ctx, *g, commit) {
		why = fmt.Sprintf("control-node %s is down or catching up; %s leads until it has been current for %s", control, self, Stabilization)
		return
	}
	why = fmt.Sprintf("handing leadership back to control-node %s (it is current)", control)
	a.cfg.Log.Info("raft: transferring leadership back to the control-node", "to", control)
	if err := a.cfg.Raft.TransferLeadership(g.ID, g.RaftAddr); err != nil {
		a.cfg.Log.Warn("raft: leadership transfer", "to", control, "err", err)
	}
}

// Why is why this server leads, as its last pass saw it; before its first pass (right after an
// election or a start), what the record alone says.
func (a *Autopilot) Why() string {
	a.mu.Lock()
	why := a.why
	a.mu.Unlock()
	if why != "" {
		return why
	}
	if a.cfg.Record.ControlNode() == a.cfg.Name {
		return "the control-node leads"
	}
	return fmt.Sprintf("%s was elected; why it leads is said after its first autopilot pass", a.cfg.Name)
}

// EvenWarning says why an even count of servers is worth no more than one server fewer; "" for
// an odd count.
func EvenWarning(servers int) string {
	if servers < 2 || servers%2 == 1 {
		return ""
	}
	return fmt.Sprintf("%d servers is an even count: a quorum needs %d, so it survives no more losses than %d servers would; run 3 or 5",
		servers, servers/2+1, servers-1)
}
