package fsm

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"meshd/catalogue"
)

var nodeNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Apply applies one encoded command to the record. It returns what the command produced (an
// enrolled node, for example) or the reason it was refused; a refused command leaves r unchanged.
//
// A panic while applying (a parser meeting input it cannot handle) refuses the command instead of
// ending the process: the same entry is replayed by every server on every start, so a panic
// would stop all of them for good. Apply checks before it changes anything, so a panic in the
// checks leaves the record as it was; wherever it happens, it happens alike on every server.
func Apply(r *Record, data []byte) (any, error) {
	v, _, err := applyTouching(r, data)
	return v, err
}

// applyTouching is Apply, saying also which declarations the command touched (Touched).
func applyTouching(r *Record, data []byte) (v any, t Touched, err error) {
	defer func() {
		if p := recover(); p != nil {
			var c struct {
				Op Op `json:"op"`
			}
			_ = json.Unmarshal(data, &c)
			r.forgetAll()
			v, t, err = nil, Touched{}, refuse(c.Op, "", "", "the command could not be applied (a fault in this server: %v); refused, the record is as it was", p)
		}
	}()
	p := pendingFor(r, data)
	if v, err = apply(r, data); err != nil {
		return v, Touched{}, err
	}
	return v, p.afterApply(r, v), nil
}

// apply decodes one command and dispatches it by op: one switch, every op of the record in one
// place (each case is a call), so what the record accepts reads at once.
func apply(r *Record, data []byte) (any, error) {
	var c Command
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, refuse("", "", "", "not a command: %v", err)
	}
	if c.V < 1 || c.V > Version {
		return nil, refuse(c.Op, "", "", "command version %d is not one this server applies (it applies 1 to %d); upgrade this server", c.V, Version)
	}
	decode := func(v any) error {
		if err := json.Unmarshal(c.Body, v); err != nil {
			return refuse(c.Op, "", "", "malformed %s command: %v", c.Op, err)
		}
		return nil
	}
	if c.Op != OpGenesis && r.Genesis == nil {
		return nil, refuse(c.Op, "", "", "the mesh has had no genesis yet")
	}
	switch c.Op {
	case OpGenesis:
		var b Genesis
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyGenesis(r, &c, &b)
	case OpNodeEnrol:
		var b Enrol
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyEnrol(r, &c, &b)
	case OpModeSet:
		var b SetMode
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applySetMode(r, &c, &b)
	case OpSettingsSet:
		var b SetSettings
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applySettings(r, &c, &b)
	case OpModuleAssign, OpModuleUnassign, OpModuleTake:
		var b ModuleOnNode
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyModule(r, &c, &b)
	case OpModuleAssignMany, OpModuleTakeMany:
		var b ModuleOnNodes
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyModuleMany(r, &c, &b)
	case OpCatalogueAdd:
		var b CatalogueAdd
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyCatalogueAdd(r, &c, &b)
	case OpModuleConfirm:
		var b ModuleConfirm
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyModuleConfirm(r, &c, &b)
	case OpTunnelTake:
		var b TunnelTake
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyTunnelTake(r, &c, &b)
	case OpFlip:
		var b Flip
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyFlip(r, &c, &b)
	case OpFlipDone:
		var b FlipDone
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyFlipDone(r, &c, &b)
	case OpTokenCreate:
		var b TokenCreate
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyTokenCreate(r, &c, &b)
	case OpServerRemove:
		var b ServerRemove
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyServerRemove(r, &c, &b)
	case OpNodeRemove:
		var b NodeRemove
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyNodeRemove(r, &c, &b)
	case OpCredentialCreate:
		var b CredentialCreate
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyCredentialCreate(r, &c, &b)
	case OpCredentialRevoke:
		var b CredentialRevoke
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyCredentialRevoke(r, &c, &b)
	case OpHostEvents:
		var b HostEvents
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyHostEvents(r, &c, &b)
	case OpHistoryKeep:
		var b HistoryKeepSet
		if err := decode(&b); err != nil {
			return nil, err
		}
		return applyHistoryKeep(r, &c, &b)
	}
	return nil, refuse(c.Op, "", "", "unknown command %q", c.Op)
}

func applySetMode(r *Record, c *Command, b *SetMode) (any, error) {
	n := r.Nodes[b.Node]
	if n == nil {
		return nil, unknownNode(r, c.Op, b.Node)
	}
	if !b.Mode.valid() {
		return nil, refuse(c.Op, b.Node, "", "mode %q is not adopted or converged", b.Mode)
	}
	if n.Mode == b.Mode {
		return nil, refuse(c.Op, b.Node, "", "already %s (since %s)", n.Mode, n.ModeSince.Format("2006-01-02 15:04:05Z07:00"))
	}
	// Converging takes every module not yet taken; returning to adopted keeps them taken.
	n.Taken = append([]string{}, n.Assigned...)
	n.Mode = b.Mode
	n.ModeSince = c.At
	return n, nil
}

func applySettings(r *Record, c *Command, b *SetSettings) (any, error) {
	trial, err := trySettings(r, c.Op, b)
	if err != nil {
		return nil, err
	}
	for _, name := range trial.Assigned {
		if err := checkPrivilege(r, trial, c, name); err != nil {
			return nil, err
		}
	}
	r.Nodes[b.Node].Settings = trial.Settings
	return r.Nodes[b.Node], nil
}

// TrySettings is the node as b would leave it, refused as the record would refuse the command;
// the record is not changed. The API checks the new ports on the node with it before proposing.
func TrySettings(r *Record, b SetSettings) (*Node, error) { return trySettings(r, OpSettingsSet, &b) }

func trySettings(r *Record, op Op, b *SetSettings) (*Node, error) {
	n := r.Nodes[b.Node]
	if n == nil {
		return nil, unknownNode(r, op, b.Node)
	}
	trial := *n
	trial.Settings = copyMap(n.Settings)
	if err := setValues(r.Catalogue, &trial, b.Values, op); err != nil {
		return nil, err
	}
	if err := checkNode(r.Catalogue, &trial, op, ""); err != nil {
		return nil, err
	}
	if _, err := tunnelRange(r.Catalogue, &trial); err != nil && n.Name == r.Tunnel.Hub {
		return nil, refuse(op, n.Name, "", "%v", err)
	}
	if err := keepsTakenTunnel(r, n, &trial, op); err != nil {
		return nil, err
	}
	return &trial, nil
}

// setValues validates and stores settings given as "module.setting" (or as the short names the
// catalogue knows) on n; an empty value deletes the setting.
func setValues(cat catalogue.Catalogue, n *Node, values map[string]string, op Op) error {
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		full, err := cat.SettingKey(k)
		if err != nil {
			return refuse(op, n.Name, "", "%v", err)
		}
		if n.Settings == nil {
			n.Settings = map[string]string{}
		}
		if values[k] == "" {
			delete(n.Settings, full)
		} else {
			n.Settings[full] = values[k]
		}
	}
	if len(n.Settings) == 0 {
		n.Settings = nil
	}
	return nil
}

// nodeValues returns the node's settings for one module, by setting name.
func nodeValues(n *Node, module string) map[string]string {
	out := map[string]string{}
	prefix := module + "."
	for k, v := range n.Settings {
		if s, ok := strings.CutPrefix(k, prefix); ok {
			out[s] = v
		}
	}
	return out
}

// checkNode resolves every module assigned to n with n's settings and refuses a bad value, two
// modules that would publish the same port, or two that would declare the same file path or
// container name once the settings are filled in. focus names the module a command is about, if any.
func checkNode(cat catalogue.Catalogue, n *Node, op Op, focus string) error {
	holders := map[string]string{}
	paths, ctrs := map[string]declaredBy{}, map[string]declaredBy{} // file path, container name -> who
	for _, name := range n.Assigned {
		m := cat[name]
		if m == nil {
			continue
		}
		res, err := m.Resolve(nodeValues(n, name))
		if err != nil {
			return refuse(op, n.Name, name, "with this node's settings: %v", err)
		}
		claim := func(key, what string) error {
			if prev, ok := holders[key]; ok {
				mod := focus
				if mod == "" {
					mod = name
				}
				return refuse(op, n.Name, mod, "port %s would be used twice on the node: by %s and by %s", key, prev, what)
			}
			holders[key] = what
			return nil
		}
		for i, f := range res.Files {
			field := fmt.Sprintf("files[%d].path", i)
			if prev, ok := paths[f.Path]; ok {
				return refuse(op, n.Name, name, "%v", m.FieldErr(field, "%s is declared also by module %s (%s) with this node's settings; one module a path", f.Path, prev.module, prev.field))
			}
			paths[f.Path] = declaredBy{name, field}
		}
		for i, ct := range res.Containers {
			field := fmt.Sprintf("containers[%d].name", i)
			if prev, ok := ctrs[ct.Name]; ok {
				return refuse(op, n.Name, name, "%v", m.FieldErr(field, "container %s is declared also by module %s (%s) with this node's settings; one module a container", ct.Name, prev.module, prev.field))
			}
			ctrs[ct.Name] = declaredBy{name, field}
		}
		for _, ct := range res.Containers {
			for _, p := range ct.Ports {
				pm, _ := catalogue.ParsePortMapping(p)
				if err := claim(fmt.Sprintf("%d/%s", pm.HostPort, pm.Proto), fmt.Sprintf("module %s (container %s)", name, ct.Name)); err != nil {
					return err
				}
			}
		}
		if name == catalogue.MeshModule {
			for _, o := range res.Openings {
				if err := claim(fmt.Sprintf("%d/%s", o.Port, o.Proto), "module "+name+" (meshd itself)"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// declaredBy is the module and manifest field that declared a path or a container on a node.
type declaredBy struct{ module, field string }

func applyModule(r *Record, c *Command, b *ModuleOnNode) (any, error) {
	n := r.Nodes[b.Node]
	if n == nil {
		return nil, unknownNode(r, c.Op, b.Node)
	}
	if err := moduleOnNode(r, c, n, b.Module); err != nil {
		return nil, err
	}
	return n, nil
}

// moduleOnNode assigns, unassigns or takes (c.Op) module on n, which it changes only once every
// check has passed: a refusal leaves n as it was. module.*.many calls it on a copy of each node.
func moduleOnNode(r *Record, c *Command, n *Node, module string) error {
	if r.Catalogue[module] == nil {
		msg := "not in the catalogue"
		if s := r.Catalogue.Suggest(module); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		} else {
			msg += " (it has: " + strings.Join(r.Catalogue.Names(), ", ") + ")"
		}
		return refuse(c.Op, n.Name, module, "%s", msg)
	}
	assigned := has(n.Assigned, module)
	switch c.Op {
	case OpModuleAssign:
		if assigned {
			return refuse(c.Op, n.Name, module, "already assigned")
		}
		trial := *n
		trial.Assigned = insert(append([]string{}, n.Assigned...), module)
		if err := checkNode(r.Catalogue, &trial, c.Op, module); err != nil {
			return err
		}
		if err := checkPrivilege(r, &trial, c, module); err != nil {
			return err
		}
		n.Assigned = trial.Assigned
		if n.Target() == Converged {
			n.Taken = insert(n.Taken, module)
		}
	case OpModuleUnassign:
		if !assigned {
			return refuse(c.Op, n.Name, module, "not assigned")
		}
		n.Assigned = remove(n.Assigned, module)
		n.Taken = remove(n.Taken, module)
	case OpModuleTake:
		switch {
		case !assigned:
			return refuse(c.Op, n.Name, module, "not assigned, so there is nothing to take; assign it first (meshd module assign %s %s)", n.Name, module)
		case n.Target() == Converged:
			return refuse(c.Op, n.Name, module, "the node is converged: every assigned module is already taken")
		case has(n.Taken, module):
			return refuse(c.Op, n.Name, module, "already taken")
		}
		n.Taken = insert(n.Taken, module)
	}
	return nil
}

func applyCatalogueAdd(r *Record, c *Command, b *CatalogueAdd) (any, error) {
	m, err := catalogue.Parse(b.Source.File, []byte(b.Source.Data))
	if err != nil {
		return nil, refuse(c.Op, "", "", "%v", err)
	}
	if err := r.Catalogue.CheckAdd(m); err != nil {
		return nil, refuse(c.Op, "", m.Name, "%v", err)
	}
	if err := checkVocabulary(c, m); err != nil {
		return nil, refuse(c.Op, "", m.Name, "%v", err)
	}
	if err := checkAddPrivilege(r, c, b, m); err != nil {
		return nil, err
	}
	trial := catalogue.Catalogue{}
	for k, v := range r.Catalogue {
		trial[k] = v
	}
	trial[m.Name] = m
	for _, name := range r.NodeNames() {
		n := r.Nodes[name]
		if has(n.Assigned, m.Name) {
			if err := checkNode(trial, n, c.Op, m.Name); err != nil {
				return nil, err
			}
		}
	}
	r.Catalogue[m.Name] = m
	grantOnAdd(r, c, b, m)
	return m, nil
}

func applyTokenCreate(r *Record, c *Command, b *TokenCreate) (any, error) {
	switch {
	case b.Hash == "":
		return nil, refuse(c.Op, "", "", "a token needs its hash")
	case r.Tokens[b.Hash] != nil:
		return nil, refuse(c.Op, "", "", "a token with this hash already exists")
	case !b.Mode.valid():
		return nil, refuse(c.Op, "", "", "mode %q is not adopted or converged", b.Mode)
	case !b.Expires.After(c.At):
		return nil, refuse(c.Op, "", "", "the token would expire before it was made")
	}
	t := &Token{Hash: b.Hash, Mode: b.Mode, Expires: b.Expires, Created: c.At, Server: b.Server, CreatedBy: c.By}
	r.Tokens[b.Hash] = t
	return t, nil
}

func applyServerRemove(r *Record, c *Command, b *ServerRemove) (any, error) {
	n := r.Nodes[b.Node]
	switch {
	case n == nil:
		return nil, unknownNode(r, c.Op, b.Node)
	case !n.Server:
		return nil, refuse(c.Op, b.Node, "", "node %s is not a server", b.Node)
	case r.Genesis != nil && r.Genesis.ControlNode == b.Node:
		return nil, refuse(c.Op, b.Node, "", "node %s is the control-node: it holds the foundation and leads the group; move leadership with `meshd operator raft transfer-leader`, not by removing it", b.Node)
	}
	n.Server = false
	return n, nil
}

// applyNodeRemove takes a node out of the record: its key revoked, its address quarantined, the
// tokens it used kept (spent). The control-node, the proposing leader and the last server stay.
func applyNodeRemove(r *Record, c *Command, b *NodeRemove) (any, error) {
	n := r.Nodes[b.Node]
	servers := 0
	for _, o := range r.Nodes {
		if o.Server {
			servers++
		}
	}
	switch {
	case n == nil:
		return nil, unknownNode(r, c.Op, b.Node)
	case b.Node == b.Leader:
		return nil, refuse(c.Op, b.Node, "", "node %s leads the Raft group: a leader does not remove itself; hand leadership to another server first (`meshd operator raft transfer-leader SERVER`)", b.Node)
	case r.Genesis != nil && r.Genesis.ControlNode == b.Node:
		return nil, refuse(c.Op, b.Node, "", "node %s is the control-node: it holds the foundation and the private network's hub", b.Node)
	case n.Server && servers <= 1:
		return nil, refuse(c.Op, b.Node, "", "node %s is the last server: the record would have nowhere to live", b.Node)
	case b.Until.Before(c.At):
		return nil, refuse(c.Op, b.Node, "", "the address quarantine would end (%s) before the removal (%s)", b.Until.Format(time.RFC3339), c.At.Format(time.RFC3339))
	}
	delete(r.Nodes, b.Node)
	if n.PublicKey != "" && !r.IsRevoked(n.PublicKey) {
		r.Revoked = append(r.Revoked, Revocation{Node: n.Name, PublicKey: n.PublicKey, At: c.At})
	}
	if a := strings.Split(n.Address, "/")[0]; a != "" {
		kept := r.Quarantined[:0:0]
		for _, q := range r.Quarantined {
			if q.Until.After(c.At) && q.Address != a {
				kept = append(kept, q)
			}
		}
		r.Quarantined = append(kept, Quarantine{Address: a, Node: n.Name, Until: b.Until})
	}
	return n, nil
}

func unknownNode(r *Record, op Op, name string) error {
	names := r.NodeNames()
	return refuse(op, name, "", "no such node (the record has: %s)", strings.Join(names, ", "))
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// detach gives the proposer its own copy of what Apply returned: a node or token of the record
// would otherwise be read (encoded to JSON) after the lock is released, while the next Apply
// changes it in place. A module is never changed once in the catalogue (catalogue.add replaces
// it whole), so it is shared.
func detach(v any) any {
	switch x := v.(type) {
	case *Node:
		if x == nil {
			return x
		}
		c := *x
		c.Settings = copyMap(x.Settings)
		c.Assigned = cloneStrings(x.Assigned)
		c.Taken = cloneStrings(x.Taken)
		return &c
	case *Token:
		if x == nil {
			return x
		}
		c := *x
		return &c
	case *ManyApplied:
		if x == nil {
			return x
		}
		c := *x
		c.Nodes = make([]*Node, len(x.Nodes))
		for i, n := range x.Nodes {
			c.Nodes[i] = detach(n).(*Node)
		}
		return &c
	case *Credential:
		if x == nil {
			return x
		}
		c := *x
		return &c
	}
	return v
}

// cloneStrings copies xs, keeping nil nil and empty empty (they encode differently).
func cloneStrings(xs []string) []string {
	if xs == nil {
		return nil
	}
	return append(make([]string, 0, len(xs)), xs...)
}
