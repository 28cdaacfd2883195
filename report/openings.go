package report

import (
	"time"

	"meshd/fsm"
)

// Opening states as the report shows them.
const (
	OpeningInForce  = "in force"
	OpeningRestored = "restored"
	OpeningFailed   = "failed"
)

// OpeningDetail is the driver's part of the host report (Report.Kinds["opening"]).
type OpeningDetail struct {
	Mode     fsm.Mode      `json:"mode"`
	Firewall FirewallView  `json:"firewall"`
	Private  string        `json:"private"`
	Openings []OpeningView `json:"openings"`
	// Guard is meshd's refuse-only table on an adopted node; Filter its derived filter on a
	// converged one.
	Guard  *TableView `json:"guard,omitempty"`
	Filter *TableView `json:"filter,omitempty"`
	// Watch says how a reload of the found firewall is noticed.
	Watch string `json:"watch"`
	// Flip is the pending flip as this node carries it out (nil: none); Retired the found
	// firewall meshd retired here (nil: none retired).
	Flip    *FlipView    `json:"flip,omitempty"`
	Retired *RetiredView `json:"retired,omitempty"`
	// Applied is when the desired state was last re-read against the machine (by a pass or the
	// watch).
	Applied time.Time `json:"applied,omitzero"`
}

// FirewallView is the firewall found on the machine.
type FirewallView struct {
	Kind string `json:"kind"`
	// Description is netfilter.Found's one line: kind, backend, active, rule counts, config.
	Description string `json:"description"`
	// Refused is why meshd cannot speak it (firewalld, unreadable), naming it.
	Refused string `json:"refused,omitempty"`
	// Config is where its configuration lives; Tables are a found nftables ruleset's own
	// tables ("inet filter"): what the flip moves aside.
	Config string   `json:"config,omitempty"`
	Tables []string `json:"tables,omitempty"`
	// Retired is true once meshd retired this firewall (the host's flip record says so, not a
	// detection): Kind is then the kind it was found as, Description says it is retired, and
	// Detected is what a detection reads on the machine now (what the retired firewall left
	// behind and the container engine's rules), for the operator to compare.
	Retired  bool   `json:"retired,omitempty"`
	Detected string `json:"detected,omitempty"`
	// ActiveAgain is true when a retired firewall is read active again as the kind it was
	// found as (`ufw enable`, its nftables or iptables rules loaded by hand): it filters beside
	// meshd's filter, and what it drops stays dropped whatever meshd's filter accepts.
	ActiveAgain bool `json:"active_again,omitempty"`
}

// OpeningView is one declared opening and what became of it.
type OpeningView struct {
	Resource string `json:"resource"`
	Module   string `json:"module"`
	Taken    bool   `json:"taken"`
	Guarded  bool   `json:"guarded,omitempty"`
	Opening  string `json:"opening"`
	// Through says what carries it: the found firewall, meshd's filter, or both.
	Through string `json:"through,omitempty"`
	// State is OpeningInForce, OpeningRestored (in force again after something dropped it, at
	// RestoredAt) or OpeningFailed (Reason says why).
	State      string    `json:"state"`
	Since      time.Time `json:"since,omitzero"`
	RestoredAt time.Time `json:"restored_at,omitzero"`
	Reason     string    `json:"reason,omitempty"`
}

// TableView is one of meshd's own tables.
type TableView struct {
	Table string `json:"table"`
	// State is "loaded", "restored" (loaded again after something removed it, at RestoredAt),
	// "failed" or "removed".
	State      string    `json:"state"`
	Ports      []string  `json:"ports"`
	Since      time.Time `json:"since,omitzero"`
	RestoredAt time.Time `json:"restored_at,omitzero"`
	Reason     string    `json:"reason,omitempty"`
}

// FlipView is the pending flip as the node carries it out: Done once the machine is in To's
// state; Waiting says what it waits for.
type FlipView struct {
	To      fsm.Mode  `json:"to"`
	Since   time.Time `json:"since"`
	Done    bool      `json:"done"`
	Waiting string    `json:"waiting,omitempty"`
}

// RetiredView is the found firewall meshd retired on this node and how it comes back.
type RetiredView struct {
	Kind  string    `json:"kind"`
	Found string    `json:"found"`
	At    time.Time `json:"at"`
	// Restore says how the return gives it back.
	Restore string `json:"restore"`
}

// ReportFlip is the pending flip as rep (a node's report, made here or decoded from JSON) says
// the node carries it out; nil when it says nothing of one.
func ReportFlip(rep *Report) *FlipView {
	if rep == nil {
		return nil
	}
	od, ok := Detail[OpeningDetail](rep, fsm.KindOpening)
	if !ok {
		return nil
	}
	return od.Flip
}
