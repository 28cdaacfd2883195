package api

import (
	"meshd/catalogue"
	"meshd/fsm"
)

// ModuleView is a catalogue module and the nodes it is assigned to.
type ModuleView struct {
	*catalogue.Module
	AssignedTo []string `json:"assigned_to"`
	TakenOn    []string `json:"taken_on"`
}

// DeclarationView is a declaration with the record index it was composed at.
type DeclarationView struct {
	Index       uint64           `json:"index"`
	Declaration *fsm.Declaration `json:"declaration"`
}

// ModuleAddRequest carries a manifest to the record.
type ModuleAddRequest struct {
	Source catalogue.Source `json:"source"`
}
