package fsm

import (
	"strings"
	"time"

	"meshd/catalogue"
)

// placesSince is the first command version that judges a module by the allowlist
// (catalogue.CheckPlaces) and wants the operator's own word for a privileged one.
const placesSince = 6

// powersSince is the first command version whose manifests say a container's Runtime, and that
// judges its powers over the machine (catalogue.CheckPowers) as root-equivalent.
const powersSince = 7

// checkVocabulary refuses, for a command before powersSince, a manifest saying what only
// version 7 can: those fields were unknown then, and a replayed log must refuse what it refused.
func checkVocabulary(c *Command, m *catalogue.Module) error {
	if c.V >= powersSince {
		return nil
	}
	if fields := m.Vocabulary7(); len(fields) > 0 {
		return m.FieldErr(fields[0], "unknown field(s) for command version %d: %s (they need version %d)",
			c.V, strings.Join(fields, ", "), powersSince)
	}
	return nil
}

// checkPlacesAndPowers is the allowlist of version 6 (CheckPlaces) and, from version 7, the
// containers' powers (CheckPowers), with node's settings (nil: the defaults).
func checkPlacesAndPowers(c *Command, m *catalogue.Module, node map[string]string) error {
	if err := m.CheckPlaces(node); err != nil {
		return err
	}
	if c.V >= powersSince {
		return m.CheckPowers(node)
	}
	return nil
}

// OpModuleConfirm is the operator's confirmation of a module that, judged again by the allowlist
// after an upgrade, needs the word it was added without (Record.Unconfirmed).
const OpModuleConfirm Op = "module.confirm"

// Grant is the operator's word that a module may be root on the machines it is assigned to: who
// said so and when (the command's By and At). It is given with `meshd module add --privileged`
// or `meshd module confirm`, and dropped when the module is added again without the word.
type Grant struct {
	By string    `json:"by,omitempty"`
	At time.Time `json:"at"`
}

// ModuleConfirm confirms Module (OpModuleConfirm).
type ModuleConfirm struct {
	Module string `json:"module"`
}

// Unconfirmed is a module in the record that the allowlist finds root-equivalent but that no
// operator has said may be: one added before command version 6. It keeps working where it is
// assigned, and is named in `meshd status` until confirmed (or added again in its own places).
type Unconfirmed struct {
	Module string `json:"module"`
	// Reaches says what makes it root on a machine, each with why (catalogue.RootEquivalent),
	// with its defaults and with each assigned node's settings.
	Reaches []string `json:"reaches"`
}

// Unconfirmed lists, by name, the modules of the catalogue that reach beyond their own places
// (or say privileged: true) without a Grant. The rule is command version 6's: it is worked out
// from the record, the same on every server, and needs no command of its own at upgrade.
func (r *Record) Unconfirmed() []Unconfirmed {
	var out []Unconfirmed
	for _, name := range r.Catalogue.Names() {
		if r.Privileged[name] != nil {
			continue
		}
		if reaches := r.RootEquivalent(name); len(reaches) > 0 {
			out = append(out, Unconfirmed{Module: name, Reaches: reaches})
		}
	}
	return out
}

// MayReach says whether module may go beyond its own places on a machine: the operator said so
// (a Grant), or it is unconfirmed and keeps working as it did until the operator confirms it.
// Compose tells the host to confine every other module (Resource.Confined).
func (r *Record) MayReach(module string) bool {
	return r.Privileged[module] != nil || r.reachesBeyond(module)
}

// checkPrivilege refuses, for a command of privilegedSince or newer, module on node n when its
// declarations with n's settings make it root on the machine without the word for it: for
// versions 4 and 5 by the deny list (catalogue.CheckDenied); from version 6 by the allowlist
// (catalogue.CheckPlaces) unless the operator granted it. An unconfirmed module is judged as
// before on the nodes it is on, and assigning it anywhere more waits for its confirmation.
func checkPrivilege(r *Record, n *Node, c *Command, module string) error {
	m := r.Catalogue[module]
	switch {
	case c.V < privilegedSince || m == nil:
		return nil
	case c.V < placesSince:
		if err := m.CheckDenied(nodeValues(n, module)); err != nil {
			return refuse(c.Op, n.Name, module, "with this node's settings: %v", err)
		}
		return nil
	case r.Privileged[module] != nil:
		return nil
	case r.reachesBeyond(module):
		if c.Op == OpModuleAssign {
			return refuse(c.Op, n.Name, module, "module %s is root on a machine and no operator has said it may be (it was added before this version): "+
				"confirm it first (meshd module confirm %s), or add it again in its own places", module, module)
		}
		if err := m.CheckDenied(nodeValues(n, module)); err != nil {
			return refuse(c.Op, n.Name, module, "with this node's settings: %v", err)
		}
		return nil
	}
	if err := checkPlacesAndPowers(c, m, nodeValues(n, module)); err != nil {
		return refuse(c.Op, n.Name, module, "with this node's settings: %v", err)
	}
	return nil
}

// checkAddPrivilege judges, at catalogue.add, module m and the operator's word (b.Privileged):
// for versions 4 and 5 by the deny list; from version 6 a module saying privileged: true needs
// the word, the word needs a module that says it, and a module without it is kept to its places,
// with its defaults and with the settings of every node it is assigned to.
func checkAddPrivilege(r *Record, c *Command, b *CatalogueAdd, m *catalogue.Module) error {
	switch {
	case c.V < privilegedSince:
		return nil
	case c.V < placesSince:
		if err := m.CheckDenied(nil); err != nil {
			return refuse(c.Op, "", m.Name, "%v", err)
		}
		return nil
	case m.Privileged && !b.Privileged:
		return refuse(c.Op, "", m.Name, "module %s says privileged: true: it is root on every machine it is assigned to; "+
			"an operator who means it adds it with --privileged (meshd module add --privileged FILE)", m.Name)
	case !m.Privileged && b.Privileged:
		return refuse(c.Op, "", m.Name, "--privileged was given, but module %s does not say privileged: true: a privileged module says so itself", m.Name)
	case m.Privileged:
		return nil
	}
	if err := checkPlacesAndPowers(c, m, nil); err != nil {
		return refuse(c.Op, "", m.Name, "%v", err)
	}
	for _, name := range r.NodeNames() {
		if n := r.Nodes[name]; has(n.Assigned, m.Name) {
			if err := checkPlacesAndPowers(c, m, nodeValues(n, m.Name)); err != nil {
				return refuse(c.Op, name, m.Name, "with this node's settings: %v", err)
			}
		}
	}
	return nil
}

// checkGenesisPlaces keeps, from version 6, every module of the genesis catalogue to its own
// places: genesis carries no operator's word, so none of them may be privileged.
func checkGenesisPlaces(c *Command, m *catalogue.Module) error {
	if c.V < placesSince {
		return nil
	}
	if m.Privileged {
		return m.FieldErr("privileged", "module %s says privileged: true; genesis takes in no privileged module: add it after, with --privileged", m.Name)
	}
	return checkPlacesAndPowers(c, m, nil)
}

// grantOnAdd records or drops, for a version 6 catalogue.add, the operator's word on m.
func grantOnAdd(r *Record, c *Command, b *CatalogueAdd, m *catalogue.Module) {
	if c.V < placesSince {
		return
	}
	if b.Privileged {
		if r.Privileged == nil {
			r.Privileged = map[string]*Grant{}
		}
		r.Privileged[m.Name] = &Grant{By: c.By, At: c.At}
		return
	}
	delete(r.Privileged, m.Name)
	if len(r.Privileged) == 0 {
		r.Privileged = nil
	}
}

// applyModuleConfirm records the operator's word on an unconfirmed module.
func applyModuleConfirm(r *Record, c *Command, b *ModuleConfirm) (any, error) {
	switch {
	case c.V < placesSince:
		return nil, refuse(c.Op, "", b.Module, "confirming a module needs command version %d", placesSince)
	case r.Catalogue[b.Module] == nil:
		return nil, refuse(c.Op, "", b.Module, "not in the catalogue (it has: %s)", strings.Join(r.Catalogue.Names(), ", "))
	case r.Privileged[b.Module] != nil:
		g := r.Privileged[b.Module]
		return nil, refuse(c.Op, "", b.Module, "already said privileged (by %s, %s)", orSomeone(g.By), g.At.UTC().Format(time.RFC3339))
	case !r.reachesBeyond(b.Module):
		return nil, refuse(c.Op, "", b.Module, "module %s stays in its own places and needs no privilege: nothing to confirm", b.Module)
	}
	if r.Privileged == nil {
		r.Privileged = map[string]*Grant{}
	}
	g := &Grant{By: c.By, At: c.At}
	r.Privileged[b.Module] = g
	return *g, nil
}
