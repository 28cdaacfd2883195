package api

import (
	"time"

	"meshd/catalogue"
	"meshd/fsm"
)

// ModuleView is a catalogue module and the nodes it is assigned to.
type ModuleView struct {
	*catalogue.Module
	AssignedTo []string `json:"assigned_to"`
	TakenOn    []string `json:"taken_on"`
	// Privilege is set for a module that is root on a machine: said so by an operator, or not
	// yet confirmed since the upgrade that brought the allowlist.
	Privilege *ModulePrivilege `json:"privilege,omitempty"`
}

// ModulePrivilege is a module that is root on the machines it is assigned to: who said it may be
// and when (fsm.Grant), or Unconfirmed; and what makes it so, each with why.
type ModulePrivilege struct {
	Module string    `json:"module"`
	By     string    `json:"by,omitempty"`
	At     time.Time `json:"at,omitempty"`
	// Unconfirmed: the record took the module in before the allowlist and no operator has said
	// it may be root; it keeps working where it is assigned (`meshd module confirm MODULE`).
	Unconfirmed bool     `json:"unconfirmed,omitempty"`
	Reaches     []string `json:"reaches"`
}

// DeclarationView is a declaration with the record index it was composed at.
type DeclarationView struct {
	Index       uint64           `json:"index"`
	Declaration *fsm.Declaration `json:"declaration"`
}

// ModuleAddRequest carries a manifest to the record.
type ModuleAddRequest struct {
	Source catalogue.Source `json:"source"`
	// Privileged is the operator's word that the module may be root (`module add --privileged`).
	Privileged bool `json:"privileged,omitempty"`
}
